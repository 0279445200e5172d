package devicecount

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// NodeDevice is one device a name's classes select on a node.
type NodeDevice struct {
	ID     structured.DeviceID
	Device *resourceapi.Device
	// Sharing are the devices of its pool that draw on a counter set it
	// draws on (a GPU's MIG placements): while one of them is allocated,
	// the allocator does not give out this device. The list includes the
	// device itself and may list a device more than once; it is shared
	// with the other devices of the set, read it, do not change it.
	Sharing []structured.DeviceID
}

// Devices returns, per node, the devices of the node's own ResourceSlices
// (spec.nodeName; the newest generation of each pool) that the classes of
// name select, in the order the DRA allocator tries them: pools by driver
// and name, a pool's slices by name, a slice's devices in order. (The
// slices are listed in no fixed order.) The devices are the informer's:
// read them, do not change them.
func (c *Counter) Devices(ctx context.Context, classes Classes, name corev1.ResourceName, nodes []fwk.NodeInfo) (map[string][]NodeDevice, error) {
	out := make(map[string][]NodeDevice, len(nodes))
	if len(classes[name]) == 0 || len(nodes) == 0 || c.dra == nil {
		return out, nil
	}
	want := make(map[string]bool, len(nodes))
	for _, ni := range nodes {
		want[ni.Node().Name] = true
	}
	list, err := c.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	newest := NewestGenerations(list)
	key := classes.key(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	byNode := make(map[string][]*resourceapi.ResourceSlice, len(nodes))
	for _, slice := range list {
		node := ptr.Deref(slice.Spec.NodeName, "")
		if want[node] && !newest.Stale(slice) {
			byNode[node] = append(byNode[node], slice)
		}
	}
	consumers := map[pool]map[string][]structured.DeviceID{}
	for node, slices := range byNode {
		if len(slices) > 1 {
			sortLikeAllocator(slices)
		}
		for _, slice := range slices {
			c.nodeDevices(ctx, slice, node, name, classes, key, out, consumers)
		}
	}
	if len(consumers) > 0 {
		for _, devs := range out {
			linkSharing(devs, consumers)
		}
	}
	return out, nil
}

// sortLikeAllocator orders a node's slices as the allocator gathers
// them: by driver, pool and slice name.
func sortLikeAllocator(list []*resourceapi.ResourceSlice) {
	slices.SortFunc(list, func(a, b *resourceapi.ResourceSlice) int {
		return cmp.Or(cmp.Compare(a.Spec.Driver, b.Spec.Driver), cmp.Compare(a.Spec.Pool.Name, b.Spec.Pool.Name), cmp.Compare(a.Name, b.Name))
	})
}

// nodeDevices adds a slice's selected devices to its node's and its
// counter sets' consumers to the pool's. Callers hold c.mu.
func (c *Counter) nodeDevices(ctx context.Context, slice *resourceapi.ResourceSlice, node string, name corev1.ResourceName, classes Classes, key string, out map[string][]NodeDevice, consumers map[pool]map[string][]structured.DeviceID) {
	sel := c.selection(ctx, slice, name, classes[name], key)
	for set, ids := range sel.consumers {
		p := poolOf(slice)
		if consumers[p] == nil {
			consumers[p] = map[string][]structured.DeviceID{}
		}
		consumers[p][set] = append(consumers[p][set], ids...)
	}
	for j, d := range sel.devices {
		out[node] = append(out[node], NodeDevice{ID: sel.ids[j], Device: &slice.Spec.Devices[d]})
	}
}

// linkSharing lists, for each device that draws on counter sets, the
// devices of its pool that draw on them: the set's own list where it
// draws on one set (no copy: a GPU's dozens of MIG placements would
// otherwise each copy the others), joined where it draws on several.
func linkSharing(devs []NodeDevice, consumers map[pool]map[string][]structured.DeviceID) {
	for i := range devs {
		d := &devs[i]
		sets := consumers[pool{d.ID.Driver.String(), d.ID.Pool.String()}]
		for k, cc := range d.Device.ConsumesCounters {
			if k == 0 {
				d.Sharing = sets[cc.CounterSet]
				continue
			}
			d.Sharing = append(slices.Clip(d.Sharing), sets[cc.CounterSet]...)
		}
	}
}

// AllocatedState returns the devices allocated to any claim and what
// shared devices' claims consume (see GatherAllocated).
func (c *Counter) AllocatedState(cs fwk.CycleState) (*structured.AllocatedState, error) {
	if c.dra == nil {
		return &structured.AllocatedState{}, nil
	}
	s, err := GatherAllocated(cs, c.allocatedState)
	if err != nil {
		return nil, err
	}
	return s.AllocatedState, nil
}
