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
	"k8s.io/dynamic-resource-allocation/structured"
)

// Node classes: nodes whose devices and devices in use look alike, short
// of names, give the same answer to "how many members fit", so the DRA
// allocator runs once per class, not once per node. The hashing here is
// pure: slices and allocated state in, a class per node out.

// deviceSeed hashes device names within this process; classes are only
// compared within one plan.
var deviceSeed = maphash.MakeSeed()

// classKey is a node's class: the content of its slices, names left out,
// and the devices in use in its pools.
type classKey struct {
	content [32]byte
	inUse   uint64
}

// sliceView is what the node classes and the allocator's per-node slices
// are derived from, kept while the lister returns the same slice objects:
// an informer replaces an object on every change (a DeviceTaintRule's
// patch included) and never changes one in place, so the same objects
// are the same content. Building it walks and hashes every slice; a plan
// asks for classes once per member shape and per preemption simulation.
type sliceView struct {
	set    map[*resourceapi.ResourceSlice]struct{}
	slices *nodeSlices
	nodes  map[string]nodeContent
	// devices places each listed device in its pool (an index into the
	// pools in use) with the hash of its place in its slice; pools
	// indexes pools by driver and pool name (the device name left empty).
	devices map[structured.DeviceID]devicePlace
	pools   map[structured.DeviceID]int
}

type devicePlace struct {
	pool int
	hash uint64
}

// nodeContent is the hash of a node's slices and the pools it covers, in
// the order their devices in use are added to its class.
type nodeContent struct {
	sum   [32]byte
	pools []int
}

// same reports whether all are the slices the view was built from.
func (v *sliceView) same(all []*resourceapi.ResourceSlice) bool {
	if len(all) != len(v.set) {
		return false
	}
	for _, s := range all {
		if _, ok := v.set[s]; !ok {
			return false
		}
	}
	return true
}

// view returns the view of the slices, built again only when they
// changed.
func (e *capacityEstimator) view(all []*resourceapi.ResourceSlice) *sliceView {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lastView != nil && e.lastView.same(all) {
		return e.lastView
	}
	v := &sliceView{
		set:     make(map[*resourceapi.ResourceSlice]struct{}, len(all)),
		slices:  newNodeSlices(all),
		nodes:   map[string]nodeContent{},
		devices: map[structured.DeviceID]devicePlace{},
		pools:   map[structured.DeviceID]int{},
	}
	type part struct {
		driver string
		pool   int
		sum    [32]byte
	}
	perNode := map[string][]part{}
	hashes := make(map[*resourceapi.ResourceSlice]sliceHash, len(all))
	for _, s := range all {
		v.set[s] = struct{}{}
		if s.Spec.NodeName == nil {
			continue
		}
		h, ok := e.sliceHashes[s]
		if !ok {
			h = sliceHash{sum: hashSlice(s), positions: make(map[string]uint64, len(s.Spec.Devices))}
			var buf [40]byte
			for i, d := range s.Spec.Devices {
				copy(buf[:32], h.sum[:])
				binary.LittleEndian.PutUint64(buf[32:], uint64(i))
				h.positions[d.Name] = maphash.Bytes(deviceSeed, buf[:])
			}
		}
		hashes[s] = h
		full := structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, "")
		id := structured.DeviceID{Driver: full.Driver, Pool: full.Pool}
		pool, ok := v.pools[id]
		if !ok {
			pool = len(v.pools)
			v.pools[id] = pool
		}
		perNode[*s.Spec.NodeName] = append(perNode[*s.Spec.NodeName], part{s.Spec.Driver, pool, h.sum})
		for name, p := range h.positions {
			id.Device = structured.MakeDeviceID("", "", name).Device
			if _, seen := v.devices[id]; !seen {
				v.devices[id] = devicePlace{pool: pool, hash: p}
			}
		}
	}
	// Only the live slices' hashes are kept: slices come and go with
	// nodes and drivers.
	e.sliceHashes = hashes
	for node, parts := range perNode {
		sort.Slice(parts, func(i, j int) bool {
			if parts[i].driver != parts[j].driver {
				return parts[i].driver < parts[j].driver
			}
			return string(parts[i].sum[:]) < string(parts[j].sum[:])
		})
		h := sha256.New()
		var c nodeContent
		for _, p := range parts {
			h.Write([]byte(p.driver))
			h.Write(p.sum[:])
			if !slices.Contains(c.pools, p.pool) {
				c.pools = append(c.pools, p.pool)
			}
		}
		copy(c.sum[:], h.Sum(nil))
		v.nodes[node] = c
	}
	e.lastView = v
	return v
}

// classes gives, per node, the content of its slices (ignoring the node
// name, pool name, device names and device UUIDs) and the devices in use
// in its pools, each by its place in its slice: nodes with the same class
// answer the same.
func (v *sliceView) classes(allocated *structured.AllocatedState) map[string]classKey {
	// The devices in use per pool, as an order-free sum of the hashes of
	// their places in the pool's slices (of their names where no slice
	// lists them): no strings built or sorted per device, on every plan
	// and every preemption simulation.
	inUse := make([]uint64, len(v.pools))
	add := func(id structured.DeviceID, extra uint64) {
		if p, ok := v.devices[id]; ok {
			inUse[p.pool] += p.hash ^ extra
			return
		}
		if pool, ok := v.pools[structured.DeviceID{Driver: id.Driver, Pool: id.Pool}]; ok {
			inUse[pool] += maphash.String(deviceSeed, id.Device.String()) ^ extra
		}
	}
	for id := range allocated.AllocatedDevices {
		add(id, 0)
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
		add(id, maphash.String(deviceSeed, "{"+strings.Join(parts, ",")+"}"))
	}
	out := make(map[string]classKey, len(v.nodes))
	var h maphash.Hash
	var buf [8]byte
	for node, c := range v.nodes {
		h.SetSeed(deviceSeed)
		for _, p := range c.pools {
			binary.LittleEndian.PutUint64(buf[:], inUse[p])
			h.Write(buf[:])
		}
		out[node] = classKey{content: c.sum, inUse: h.Sum64()}
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
