package plugin

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// driverResources lays an inventory out as the ResourceSlices of one pool
// named after the node, within the limits of resource.k8s.io/v1:
//   - counter sets and devices never share a slice;
//   - at most ResourceSliceMaxCounterSets counter sets per slice;
//   - at most ResourceSliceMaxDevices devices per slice, or
//     ResourceSliceMaxDevicesWithAdvancedFeatures once a device in the slice
//     consumes counters, has taints or allows multiple allocations.
//
// Order is kept: counter slices come first and devices stay in inventory
// order, which is the order the allocator tries them.
func driverResources(nodeName string, inv *Inventory) (*resourceslice.DriverResources, error) {
	if err := checkCounterRefs(inv); err != nil {
		return nil, err
	}
	var slices []resourceslice.Slice
	for start := 0; start < len(inv.SharedCounters); start += resourceapi.ResourceSliceMaxCounterSets {
		end := min(start+resourceapi.ResourceSliceMaxCounterSets, len(inv.SharedCounters))
		slices = append(slices, resourceslice.Slice{SharedCounters: inv.SharedCounters[start:end]})
	}
	var current []resourceapi.Device
	limit := resourceapi.ResourceSliceMaxDevices
	for _, dev := range inv.Devices {
		if advanced(dev) {
			limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
		if len(current) >= limit {
			slices = append(slices, resourceslice.Slice{Devices: current})
			current = nil
			limit = resourceapi.ResourceSliceMaxDevices
			if advanced(dev) {
				limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			}
		}
		current = append(current, dev)
	}
	if len(current) > 0 || len(slices) == 0 {
		slices = append(slices, resourceslice.Slice{Devices: current})
	}
	return &resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{nodeName: {Slices: slices}},
	}, nil
}

// advanced reports whether a device uses a feature that lowers the number
// of devices a slice may hold.
func advanced(dev resourceapi.Device) bool {
	return len(dev.ConsumesCounters) > 0 || len(dev.Taints) > 0 ||
		(dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations) ||
		len(dev.BindingConditions) > 0
}

// checkCounterRefs rejects an inventory whose devices consume counters
// that are not declared, so a backend bug fails loudly at start-up instead
// of as an API validation error in the background.
func checkCounterRefs(inv *Inventory) error {
	declared := map[string]map[string]bool{}
	for _, set := range inv.SharedCounters {
		names := map[string]bool{}
		for name := range set.Counters {
			names[name] = true
		}
		declared[set.Name] = names
	}
	for _, dev := range inv.Devices {
		for _, use := range dev.ConsumesCounters {
			set, ok := declared[use.CounterSet]
			if !ok {
				return fmt.Errorf("device %s consumes from undeclared counter set %q", dev.Name, use.CounterSet)
			}
			for name := range use.Counters {
				if !set[name] {
					return fmt.Errorf("device %s consumes undeclared counter %q of set %q", dev.Name, name, use.CounterSet)
				}
			}
		}
	}
	return nil
}

// ResourceSlices returns the ResourceSlice objects the plugin publishes
// for an inventory on a node, as the API server stores them. Benchmarks
// and tools use it to reproduce a node's slices without running the
// plugin.
func ResourceSlices(driver, nodeName string, inv *Inventory) ([]*resourceapi.ResourceSlice, error) {
	res, err := driverResources(nodeName, inv)
	if err != nil {
		return nil, err
	}
	pool := res.Pools[nodeName]
	out := make([]*resourceapi.ResourceSlice, 0, len(pool.Slices))
	for i, s := range pool.Slices {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", nodeName, driver, i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         driver,
				Pool:           resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				NodeName:       &nodeName,
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		}
		out = append(out, slice)
	}
	return out, nil
}

// markSimulated sets SimulatedAttribute on every device of the pools. The
// attribute maps are copied: the inventory's stay as the backend made
// them.
func markSimulated(res *resourceslice.DriverResources) {
	for _, pool := range res.Pools {
		for _, slice := range pool.Slices {
			for i := range slice.Devices {
				dev := &slice.Devices[i]
				attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(dev.Attributes)+1)
				for k, v := range dev.Attributes {
					attrs[k] = v
				}
				attrs[SimulatedAttribute] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}
				dev.Attributes = attrs
			}
		}
	}
}
