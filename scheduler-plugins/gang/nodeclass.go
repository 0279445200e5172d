package gang

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Node classes: nodes whose devices and devices in use look alike, short
// of names, give the same answer to "how many members fit", so the DRA
// allocator runs once per class, not once per node. The hashing here is
// pure: slices and allocated state in, a class per node out.

// deviceSeed hashes device names within this process; classes are only
// compared within one plan.
var deviceSeed = maphash.MakeSeed()

// nodeClasses hashes, per node, the content of its slices (ignoring the
// node name, pool name, device names and device UUIDs) and the devices in
// use in its pools, each by its place in its slice: nodes with the same
// hash answer the same.
func (e *capacityEstimator) nodeClasses(resourceSlices []*resourceapi.ResourceSlice, allocated *structured.AllocatedState) map[string][32]byte {
	type part struct {
		driver, pool string
		sum          [32]byte
	}
	perNode := map[string][]part{}
	type poolID struct{ driver, pool string }
	positions := map[poolID][]map[string]uint64{}
	if len(e.sliceHashes) > 2*len(resourceSlices)+64 {
		// Slices come and go with nodes and drivers: keep only the live
		// ones' hashes.
		live := make(map[types.UID]sliceHash, len(resourceSlices))
		for _, s := range resourceSlices {
			if h, ok := e.sliceHashes[s.UID]; ok {
				live[s.UID] = h
			}
		}
		e.sliceHashes = live
	}
	for _, s := range resourceSlices {
		if s.Spec.NodeName == nil {
			continue
		}
		h, ok := e.sliceHashes[s.UID]
		if !ok || h.resourceVersion != s.ResourceVersion {
			h = sliceHash{resourceVersion: s.ResourceVersion, sum: hashSlice(s), positions: make(map[string]uint64, len(s.Spec.Devices))}
			var buf [40]byte
			for i, d := range s.Spec.Devices {
				copy(buf[:32], h.sum[:])
				binary.LittleEndian.PutUint64(buf[32:], uint64(i))
				h.positions[d.Name] = maphash.Bytes(deviceSeed, buf[:])
			}
			e.sliceHashes[s.UID] = h
		}
		perNode[*s.Spec.NodeName] = append(perNode[*s.Spec.NodeName], part{s.Spec.Driver, s.Spec.Pool.Name, h.sum})
		id := poolID{s.Spec.Driver, s.Spec.Pool.Name}
		positions[id] = append(positions[id], h.positions)
	}
	// device hashes a device in use by its place in its pool's slices;
	// by its name when no slice of the pool lists it.
	device := func(id poolID, name string) uint64 {
		for _, p := range positions[id] {
			if v, ok := p[name]; ok {
				return v
			}
		}
		return maphash.String(deviceSeed, name)
	}
	// The devices in use per pool, as an order-free sum of their hashes:
	// no strings built or sorted per device, on every plan and every
	// preemption simulation.
	inUse := map[poolID]uint64{}
	for id := range allocated.AllocatedDevices {
		pool := poolID{id.Driver.String(), id.Pool.String()}
		inUse[pool] += device(pool, id.Device.String())
	}
	// Devices shared by several claims differ by how much of them is
	// taken, not by which share ids hold them.
	for id, consumed := range allocated.AggregatedCapacity {
		var parts []string
		for name, q := range consumed {
			if q != nil {
				parts = append(parts, string(name)+"="+q.String())
			}
		}
		sort.Strings(parts)
		pool := poolID{id.Driver.String(), id.Pool.String()}
		inUse[pool] += device(pool, id.Device.String()) ^ maphash.String(deviceSeed, "{"+strings.Join(parts, ",")+"}")
	}
	out := make(map[string][32]byte, len(perNode))
	for node, parts := range perNode {
		sort.Slice(parts, func(i, j int) bool {
			if parts[i].driver != parts[j].driver {
				return parts[i].driver < parts[j].driver
			}
			return string(parts[i].sum[:]) < string(parts[j].sum[:])
		})
		h := sha256.New()
		var buf [8]byte
		var pools []poolID
		for _, p := range parts {
			h.Write([]byte(p.driver))
			h.Write(p.sum[:])
			if id := (poolID{p.driver, p.pool}); !slices.Contains(pools, id) {
				pools = append(pools, id)
				binary.LittleEndian.PutUint64(buf[:], inUse[id])
				h.Write(buf[:])
			}
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		out[node] = sum
	}
	return out
}

// hashSlice hashes what decides allocations on a slice, leaving out names
// that differ between identical nodes.
func hashSlice(s *resourceapi.ResourceSlice) [32]byte {
	h := sha256.New()
	var buf [8]byte
	write := func(v string) { h.Write([]byte(v)); h.Write([]byte{0}) }
	for _, cs := range s.Spec.SharedCounters {
		write(cs.Name)
		for _, name := range sortedKeys(cs.Counters) {
			write(name)
			v := cs.Counters[name].Value
			write(quantityKey(v))
		}
	}
	for _, d := range s.Spec.Devices {
		// Not the device's name: devices are told apart by their place
		// in the slice (sliceHash.positions).
		write("device")
		for _, name := range sortedKeys(d.Attributes) {
			if strings.Contains(strings.ToLower(string(name)), "uuid") {
				continue
			}
			a := d.Attributes[name]
			write(string(name))
			switch {
			case a.StringValue != nil:
				write(*a.StringValue)
			case a.IntValue != nil:
				binary.LittleEndian.PutUint64(buf[:], uint64(*a.IntValue))
				h.Write(buf[:])
			case a.BoolValue != nil:
				write(fmt.Sprint(*a.BoolValue))
			case a.VersionValue != nil:
				write(*a.VersionValue)
			}
		}
		for _, name := range sortedKeys(d.Capacity) {
			write(string(name))
			v := d.Capacity[name].Value
			write(quantityKey(v))
		}
		for _, c := range d.ConsumesCounters {
			write(c.CounterSet)
			for _, name := range sortedKeys(c.Counters) {
				write(name)
				v := c.Counters[name].Value
				write(quantityKey(v))
			}
		}
		for _, t := range d.Taints {
			write(t.Key + "=" + t.Value + ":" + string(t.Effect))
		}
		write(fmt.Sprint(d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations))
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// quantityKey is a quantity's value in one spelling for each value:
// Quantity.String gives back the text a quantity was parsed from ("01",
// "1000m", "1Ki" and "1024" all stay as written), so equal capacities
// would hash apart. The value is written as unscaled digits, trailing
// zeros dropped, and a power of ten.
func quantityKey(v resource.Quantity) string {
	d := v.AsDec() // v is a copy; the result is only read
	u := new(big.Int).Set(d.UnscaledBig())
	exp := -int64(d.Scale())
	if u.Sign() == 0 {
		return "0"
	}
	ten, r := big.NewInt(10), new(big.Int)
	for {
		q, m := new(big.Int).QuoRem(u, ten, r)
		if m.Sign() != 0 {
			break
		}
		u, exp = q, exp+1
	}
	return u.String() + "e" + strconv.FormatInt(exp, 10)
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}
