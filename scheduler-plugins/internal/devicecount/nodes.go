package devicecount

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// NodeCount is one resource name's devices on one node.
type NodeCount struct {
	// Allocatable is the number of devices the classes select.
	Allocatable int64
	// Allocated is how many of them are allocated to claims; counted only
	// when asked for.
	Allocated int64
}

// NodeCounts holds device counts per node and resource name.
type NodeCounts struct {
	names []corev1.ResourceName
	nodes map[string][]NodeCount
}

// Get returns a name's devices on a node; zero for names or nodes that
// were not counted. A nil NodeCounts counts nothing.
func (n *NodeCounts) Get(node string, name corev1.ResourceName) NodeCount {
	if n == nil {
		return NodeCount{}
	}
	counts := n.nodes[node]
	for i, nm := range n.names {
		if nm == name && i < len(counts) {
			return counts[i]
		}
	}
	return NodeCount{}
}

// Nodes counts, for each node, the devices of each name in classes, and
// with allocated also how many of them are allocated.
func (c *Counter) Nodes(ctx context.Context, cs fwk.CycleState, classes Classes, nodes []fwk.NodeInfo, allocated bool) (*NodeCounts, error) {
	names := classes.Names()
	out := &NodeCounts{names: names, nodes: make(map[string][]NodeCount, len(nodes))}
	if len(names) == 0 || len(nodes) == 0 {
		return out, nil
	}
	var inUse sets.Set[structured.DeviceID]
	if allocated {
		var err error
		if inUse, err = c.allocated(cs); err != nil {
			return nil, err
		}
	}
	list, err := c.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	byName := make(map[string]*corev1.Node, len(nodes))
	backing := make([]NodeCount, len(nodes)*len(names))
	for i, ni := range nodes {
		node := ni.Node()
		byName[node.Name] = node
		out.nodes[node.Name] = backing[i*len(names) : (i+1)*len(names) : (i+1)*len(names)]
	}
	keys := make([]string, len(names))
	for i, name := range names {
		keys[i] = classes.key(name)
	}
	newest := NewestGenerations(list)

	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.selected) > 2*len(list)*c.names.Len()+64 {
		c.selected = map[selectionKey]selection{} // slices came and went
	}
	for _, slice := range list {
		if newest.Stale(slice) {
			continue // an older generation that is being replaced
		}
		if name := ptr.Deref(slice.Spec.NodeName, ""); name != "" {
			if counts, ok := out.nodes[name]; ok {
				c.add(ctx, counts, slice, classes, names, keys, inUse, nil)
			}
			continue
		}
		// Slices for several nodes: few, but each is checked against
		// every node.
		for nodeName, counts := range out.nodes {
			node := byName[nodeName]
			if ptr.Deref(slice.Spec.PerDeviceNodeSelection, false) {
				c.add(ctx, counts, slice, classes, names, keys, inUse, func(d *resourceapi.Device) bool {
					return c.covers(node, d.NodeName, d.AllNodes, d.NodeSelector)
				})
			} else if c.covers(node, nil, slice.Spec.AllNodes, slice.Spec.NodeSelector) {
				c.add(ctx, counts, slice, classes, names, keys, inUse, nil)
			}
		}
	}
	return out, nil
}

// add counts a slice's selected devices (those include accepts, if set)
// into one node's counts.
func (c *Counter) add(ctx context.Context, counts []NodeCount, slice *resourceapi.ResourceSlice, classes Classes, names []corev1.ResourceName, keys []string, inUse sets.Set[structured.DeviceID], include func(*resourceapi.Device) bool) {
	for i, name := range names {
		sel := c.selection(ctx, slice, name, classes[name], keys[i])
		for j, d := range sel.devices {
			if include != nil && !include(&slice.Spec.Devices[d]) {
				continue
			}
			counts[i].Allocatable++
			if inUse.Has(sel.ids[j]) {
				counts[i].Allocated++
			}
		}
	}
}

func (c *Counter) covers(node *corev1.Node, nodeName *string, allNodes *bool, selector *corev1.NodeSelector) bool {
	ok, err := structured.NodeMatches(c.features, node, ptr.Deref(nodeName, ""), ptr.Deref(allNodes, false), selector)
	return err == nil && ok
}

// selectionKey names a slice (slice names are unique) and a resource name.
type selectionKey struct {
	slice string
	name  corev1.ResourceName
}

// selection is which devices of one slice version the classes of a name
// select: indexes into spec.devices, and their IDs; and, by counter set,
// the slice's devices that draw on it.
type selection struct {
	resourceVersion, classes string
	devices                  []int
	ids                      []structured.DeviceID
	consumers                map[string][]structured.DeviceID
}

// selection returns the cached selection, or evaluates the classes'
// selectors on the slice's devices. A device counts once under a name
// however many of the name's classes select it. Callers hold c.mu.
func (c *Counter) selection(ctx context.Context, slice *resourceapi.ResourceSlice, name corev1.ResourceName, classes []*resourceapi.DeviceClass, classesKey string) selection {
	key := selectionKey{slice: slice.Name, name: name}
	if s, ok := c.selected[key]; ok && s.resourceVersion == slice.ResourceVersion && s.classes == classesKey && slice.ResourceVersion != "" {
		return s
	}
	s := selection{resourceVersion: slice.ResourceVersion, classes: classesKey}
	for i := range slice.Spec.Devices {
		d := &slice.Spec.Devices[i]
		for _, cc := range d.ConsumesCounters {
			if s.consumers == nil {
				s.consumers = map[string][]structured.DeviceID{}
			}
			s.consumers[cc.CounterSet] = append(s.consumers[cc.CounterSet], structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name))
		}
		for _, class := range classes {
			if c.Selects(ctx, class.Spec.Selectors, slice.Spec.Driver, d) {
				s.devices = append(s.devices, i)
				s.ids = append(s.ids, structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name))
				break
			}
		}
	}
	c.selected[key] = s
	return s
}

// Selects tells whether all the selectors (a DeviceClass's or a
// request's) select a device, as the allocator evaluates them. A
// selector that does not compile or fails on the device selects nothing,
// as the allocator would not allocate the device for it either.
func (c *Counter) Selects(ctx context.Context, selectors []resourceapi.DeviceSelector, driver string, d *resourceapi.Device) bool {
	for _, sel := range selectors {
		if sel.CEL == nil {
			continue
		}
		expr := c.cel.GetOrCompile(sel.CEL.Expression)
		if expr.Error != nil {
			klog.FromContext(ctx).V(4).Info("Device selector does not compile", "expression", sel.CEL.Expression, "err", expr.Error)
			return false
		}
		ok, _, err := expr.DeviceMatches(ctx, cel.Device{Driver: driver, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity})
		if err != nil {
			klog.FromContext(ctx).V(5).Info("Device selector failed on a device", "expression", sel.CEL.Expression, "driver", driver, "device", d.Name, "err", err)
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// allocated returns the devices allocated to any claim, wholly or as a
// share.
func (c *Counter) allocated(cs fwk.CycleState) (sets.Set[structured.DeviceID], error) {
	state, err := GatherAllocated(cs, c.allocatedState)
	if err != nil {
		return nil, err
	}
	ids := state.AllocatedDevices
	if len(state.AllocatedSharedDeviceIDs) > 0 || len(state.AggregatedCapacity) > 0 {
		ids = ids.Clone() // not ours to change
		for shared := range state.AllocatedSharedDeviceIDs {
			ids.Insert(shared.GetDeviceID())
		}
		for id := range state.AggregatedCapacity {
			ids.Insert(id)
		}
	}
	return ids, nil
}

// GatherAllocated reads the devices allocated to any claim, in-flight
// allocations included, and what shared devices' claims consume, from a
// tracker of the DRA manager's claims (Allocated).
//
// With a cycle state, the first Strata plugin to ask in a scheduling
// cycle reads the state and keeps it there, and the cycle's later calls
// read it: the cycle sees one state, as DynamicResources sees the one it
// gathers at PreFilter. Callers must not change it.
func GatherAllocated(cs fwk.CycleState, from *Allocated) (*Snapshot, error) {
	if cs != nil {
		if d, err := cs.Read(allocatedKey); err == nil {
			return d.(allocatedData).state, nil
		}
	}
	state, err := from.State()
	if err == nil && cs != nil {
		cs.Write(allocatedKey, allocatedData{state})
	}
	return state, err
}

// allocatedKey is where a cycle's allocated state is kept.
const allocatedKey fwk.StateKey = "strata.sh/allocated-devices"

type allocatedData struct{ state *Snapshot }

// Clone implements fwk.StateData; the state is read-only.
func (a allocatedData) Clone() fwk.StateData { return a }

type pool struct{ driver, name string }

func poolOf(s *resourceapi.ResourceSlice) pool { return pool{s.Spec.Driver, s.Spec.Pool.Name} }

// Generations holds each pool's newest generation: while a driver
// replaces a pool's slices, the old ones are stale.
type Generations map[pool]int64

// NewestGenerations reads the newest generation of every pool in list.
func NewestGenerations(list []*resourceapi.ResourceSlice) Generations {
	out := make(Generations, len(list))
	for _, s := range list {
		if p := poolOf(s); s.Spec.Pool.Generation > out[p] {
			out[p] = s.Spec.Pool.Generation
		}
	}
	return out
}

// Stale reports whether a newer generation of the slice's pool exists.
func (g Generations) Stale(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Pool.Generation < g[poolOf(s)]
}
