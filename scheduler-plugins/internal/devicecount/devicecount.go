// Package devicecount counts DRA devices under resource names, for the
// score plugins that treat devices like node resources
// (NodeResourcesFitPlus, ScarceResourceAvoidance).
//
// A resource name R stands for the devices of every DeviceClass whose
// name is R, whose spec.extendedResourceName is R, or whose implicit
// extended resource name (deviceclass.resource.kubernetes.io/<class>) is
// R. On a node, R's allocatable is the number of devices of the node's
// ResourceSlices (the newest generation of each pool; node-local slices,
// and slices or devices whose nodeSelector or allNodes covers the node)
// that one of those classes selects; R's allocated is how many of them
// are allocated to a claim, wholly or as a share of consumable capacity.
// A pod's demand under R is what its claims ask of those classes; see
// Demand.
//
// Class selectors are compiled once (a CEL cache) and evaluated once per
// ResourceSlice version; a scheduling cycle then only looks devices up
// in the set of allocated devices.
//
// The package also holds what the two plugins share around the count:
// their batching signature (SignPod) and the cycle state for profiles
// that enable them at score only (Lazy).
package devicecount

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// Counter counts devices under a fixed set of resource names (a plugin's
// args). It is safe for concurrent use.
type Counter struct {
	dra      fwk.SharedDRAManager
	names    sets.Set[corev1.ResourceName]
	features structured.Features
	cel      *cel.Cache
	// allocatedState tracks the claims' allocations (nil without DRA).
	allocatedState *Allocated

	mu sync.Mutex
	// selected caches, per slice and resource name, which of the
	// slice's devices the name's classes select.
	selected map[selectionKey]selection
}

// New returns a counter for names. Without DRA (a nil manager, or the
// feature off) every name counts zero devices.
func New(dra fwk.SharedDRAManager, names []corev1.ResourceName, fts feature.Features) *Counter {
	if !fts.EnableDynamicResourceAllocation {
		dra = nil
	}
	var allocated *Allocated
	if dra != nil {
		allocated = NewAllocated(dra, fts.EnableDRAConsumableCapacity)
	}
	return &Counter{
		dra:            dra,
		allocatedState: allocated,
		names:          sets.New(names...),
		features:       dynamicresources.AllocatorFeatures(fts),
		cel: cel.NewCache(32, cel.Features{
			EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
			EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
		}),
		selected: map[selectionKey]selection{},
	}
}

// Classes maps resource names to the DeviceClasses they stand for. Names
// that stand for no class are absent: an empty Classes means there is no
// DRA work to do.
type Classes map[corev1.ResourceName][]*resourceapi.DeviceClass

// Names returns the names, sorted.
func (c Classes) Names() []corev1.ResourceName { return slices.Sorted(maps.Keys(c)) }

// Restrict returns the part of c under the given names.
func (c Classes) Restrict(names sets.Set[corev1.ResourceName]) Classes {
	out := Classes{}
	for name, classes := range c {
		if names.Has(name) {
			out[name] = classes
		}
	}
	return out
}

// Classes resolves the counter's names against the DeviceClasses that
// exist now. Listing classes is cheap (an informer's cache): a cycle does
// it before deciding whether any DRA work is needed.
func (c *Counter) Classes() (Classes, error) {
	if c.dra == nil || c.names.Len() == 0 {
		return nil, nil
	}
	list, err := c.dra.DeviceClasses().List()
	if err != nil {
		return nil, fmt.Errorf("list DeviceClasses: %w", err)
	}
	var out Classes
	for _, class := range list {
		for _, name := range namesOf(class) {
			if !c.names.Has(name) || slices.Contains(out[name], class) {
				continue
			}
			if out == nil {
				out = Classes{}
			}
			out[name] = append(out[name], class)
		}
	}
	return out, nil
}

// namesOf lists the resource names a class answers to.
func namesOf(class *resourceapi.DeviceClass) []corev1.ResourceName {
	names := []corev1.ResourceName{
		corev1.ResourceName(class.Name),
		corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + class.Name),
	}
	if ext := class.Spec.ExtendedResourceName; ext != nil && *ext != "" {
		names = append(names, corev1.ResourceName(*ext))
	}
	return names
}

// byClass inverts classes: the resource names each class counts under.
func (c Classes) byClass() map[string][]corev1.ResourceName {
	out := map[string][]corev1.ResourceName{}
	for name, classes := range c {
		for _, class := range classes {
			out[class.Name] = append(out[class.Name], name)
		}
	}
	return out
}

// key identifies the versions of a name's classes, so that a change of
// a class (its selectors) invalidates what was selected with it.
func (c Classes) key(name corev1.ResourceName) string {
	var b strings.Builder
	for _, class := range c[name] {
		b.WriteString(class.Name)
		b.WriteByte('@')
		b.WriteString(class.ResourceVersion)
		b.WriteByte(',')
	}
	return b.String()
}
