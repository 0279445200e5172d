package devicecount

import (
	"context"
	"fmt"

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
	// Sharing are the other devices of its pool that draw on a counter
	// set it draws on (a GPU's MIG placements): while one of them is
	// allocated, the allocator does not give out this device. A device
	// may be listed more than once.
	Sharing []structured.DeviceID
}

// Devices returns, per node, the devices of the node's own ResourceSlices
// (spec.nodeName; the newest generation of each pool) that the classes of
// name select, in slice order: the order the DRA allocator tries them.
// The devices are the informer's: read them, do not change them.
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
	var consumers map[pool]map[string][]structured.DeviceID
	for _, slice := range list {
		node := ptr.Deref(slice.Spec.NodeName, "")
		if !want[node] || newest.Stale(slice) {
			continue
		}
		sel := c.selection(ctx, slice, name, classes[name], key)
		for set, ids := range sel.consumers {
			if consumers == nil {
				consumers = map[pool]map[string][]structured.DeviceID{}
			}
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
	if consumers != nil {
		for _, devs := range out {
			linkSharing(devs, consumers)
		}
	}
	return out, nil
}

// linkSharing lists, for each device that draws on counter sets, the
// other devices of its pool that draw on them. A device drawing on two
// sets with a common consumer lists it twice, which its readers do not
// mind.
func linkSharing(devs []NodeDevice, consumers map[pool]map[string][]structured.DeviceID) {
	for i := range devs {
		d := &devs[i]
		for _, cc := range d.Device.ConsumesCounters {
			for _, id := range consumers[pool{d.ID.Driver.String(), d.ID.Pool.String()}][cc.CounterSet] {
				if id != d.ID {
					d.Sharing = append(d.Sharing, id)
				}
			}
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
