package gang

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"
)

// gpuSlice is one node's slice of n GPUs with the given memory, the UUIDs
// and names that differ between identical nodes included.
func gpuSlice(node string, n int, memory string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu", UID: types.UID(node + "-gpu"), ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.strata.sh", NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
	for i := 0; i < n; i++ {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"uuid":  {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
				"model": {StringValue: ptr.To("H100")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}},
		})
	}
	return s
}

// nodeNamed prefixes each device's name with its slice's node.
func nodeNamed(s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	for i := range s.Spec.Devices {
		s.Spec.Devices[i].Name = *s.Spec.NodeName + "-" + s.Spec.Devices[i].Name
	}
	return s
}

func allocated(devices ...structured.DeviceID) *structured.AllocatedState {
	s := &structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.ConsumedCapacityCollection{}}
	for _, d := range devices {
		s.AllocatedDevices.Insert(d)
	}
	return s
}

// TestNodeClasses: nodes alike but for names and UUIDs share a class;
// other devices, or other devices in use, make another.
func TestNodeClasses(t *testing.T) {
	tests := map[string]struct {
		a, b      *resourceapi.ResourceSlice
		used      *structured.AllocatedState
		sameClass bool
	}{
		"identical nodes": {gpuSlice("n1", 8, "80Gi"), gpuSlice("n2", 8, "80Gi"), allocated(), true},
		"fewer GPUs":      {gpuSlice("n1", 8, "80Gi"), gpuSlice("n2", 4, "80Gi"), allocated(), false},
		"other memory":    {gpuSlice("n1", 8, "80Gi"), gpuSlice("n2", 8, "141Gi"), allocated(), false},
		"same GPU in use on both": {gpuSlice("n1", 8, "80Gi"), gpuSlice("n2", 8, "80Gi"),
			allocated(structured.MakeDeviceID("gpu.strata.sh", "n1", "gpu-3"), structured.MakeDeviceID("gpu.strata.sh", "n2", "gpu-3")), true},
		"other GPU in use": {gpuSlice("n1", 8, "80Gi"), gpuSlice("n2", 8, "80Gi"),
			allocated(structured.MakeDeviceID("gpu.strata.sh", "n1", "gpu-3"), structured.MakeDeviceID("gpu.strata.sh", "n2", "gpu-4")), false},
		"in use on one only": {gpuSlice("n1", 8, "80Gi"), gpuSlice("n2", 8, "80Gi"),
			allocated(structured.MakeDeviceID("gpu.strata.sh", "n1", "gpu-3")), false},
		// Drivers that name devices after their node: the same places in
		// use are the same class, other places are not.
		"node-named devices, same place in use": {nodeNamed(gpuSlice("n1", 8, "80Gi")), nodeNamed(gpuSlice("n2", 8, "80Gi")),
			allocated(structured.MakeDeviceID("gpu.strata.sh", "n1", "n1-gpu-3"), structured.MakeDeviceID("gpu.strata.sh", "n2", "n2-gpu-3")), true},
		"node-named devices, other place in use": {nodeNamed(gpuSlice("n1", 8, "80Gi")), nodeNamed(gpuSlice("n2", 8, "80Gi")),
			allocated(structured.MakeDeviceID("gpu.strata.sh", "n1", "n1-gpu-3"), structured.MakeDeviceID("gpu.strata.sh", "n2", "n2-gpu-4")), false},
	}
	for name, tc := range tests {
		e := &capacityEstimator{sliceHashes: map[*resourceapi.ResourceSlice]sliceHash{}}
		got := e.view([]*resourceapi.ResourceSlice{tc.a, tc.b}).classes(tc.used)
		if same := got[*tc.a.Spec.NodeName] == got[*tc.b.Spec.NodeName]; same != tc.sameClass {
			t.Errorf("%s: same class %v, want %v", name, same, tc.sameClass)
		}
	}
}

// FuzzHashSliceIgnoresNames: node, pool and UUID never change a slice's
// hash; a device's capacity always does.
func FuzzHashSliceIgnoresNames(f *testing.F) {
	f.Add("node-a", "node-b", "80Gi", "81Gi")
	f.Add("", "x", "1", "2")
	f.Fuzz(func(t *testing.T, n1, n2, m1, m2 string) {
		q1, err1 := resource.ParseQuantity(m1)
		q2, err2 := resource.ParseQuantity(m2)
		if err1 != nil || err2 != nil {
			t.Skip()
		}
		a, b := gpuSlice(n1, 2, "1"), gpuSlice(n2, 2, "1")
		a.Spec.Devices[0].Capacity["memory"] = resourceapi.DeviceCapacity{Value: q1}
		b.Spec.Devices[0].Capacity["memory"] = resourceapi.DeviceCapacity{Value: q1}
		if hashSlice(a) != hashSlice(b) {
			t.Fatalf("slices of %q and %q differ only in names but hash apart", n1, n2)
		}
		b.Spec.Devices[0].Capacity["memory"] = resourceapi.DeviceCapacity{Value: q2}
		if (q1.Cmp(q2) == 0) != (hashSlice(a) == hashSlice(b)) && q1.String() != q2.String() {
			t.Fatalf("memory %s vs %s: equal hashes %v", q1.String(), q2.String(), hashSlice(a) == hashSlice(b))
		}
	})
}

// TestNodeClassesFollowPatchedSlices: a DeviceTaintRule patches a slice
// without changing its UID or resourceVersion; the scheduler's lister
// then returns another object, and the node's class must follow it (a
// tainted GPU is not a free one). The same objects listed again give the
// same classes from the kept view.
func TestNodeClassesFollowPatchedSlices(t *testing.T) {
	e := newCapacityEstimator(nil, feature.Features{})
	a, b := gpuSlice("n1", 8, "80Gi"), gpuSlice("n2", 8, "80Gi")
	got := e.view([]*resourceapi.ResourceSlice{a, b}).classes(allocated())
	if got["n1"] != got["n2"] {
		t.Fatalf("identical nodes in two classes")
	}
	view := e.lastView
	if e.view([]*resourceapi.ResourceSlice{b, a}).classes(allocated()); e.lastView != view {
		t.Errorf("the same slice objects built the view again")
	}
	patched := b.DeepCopy()
	patched.Spec.Devices[2].Taints = []resourceapi.DeviceTaint{{Key: "example.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	got = e.view([]*resourceapi.ResourceSlice{a, patched}).classes(allocated())
	if got["n1"] == got["n2"] {
		t.Errorf("a node with a tainted GPU is in the class of one without")
	}
}

// TestNodeSlicesKeepWholePools: the allocator is given, for a node,
// every slice of the pools it has a slice in and of the pools not bound
// to a node, and nothing of other nodes' pools.
func TestNodeSlicesKeepWholePools(t *testing.T) {
	mk := func(name, pool string, node *string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.strata.sh", NodeName: node, Pool: resourceapi.ResourcePool{Name: pool, ResourceSliceCount: 2},
		}}
	}
	n1a, n1b := mk("n1-a", "n1", ptr.To("n1")), mk("n1-counters", "n1", ptr.To("n1"))
	n2 := mk("n2-a", "n2", ptr.To("n2"))
	fabric := mk("fabric-a", "fabric", nil)
	fabric.Spec.AllNodes = ptr.To(true)
	// A pool listed under a node and without one is shared.
	mixedLocal, mixedShared := mk("mixed-a", "mixed", ptr.To("n2")), mk("mixed-b", "mixed", nil)
	ns := newNodeSlices([]*resourceapi.ResourceSlice{n1a, n2, fabric, n1b, mixedLocal, mixedShared})
	names := func(list []*resourceapi.ResourceSlice) []string {
		var out []string
		for _, s := range list {
			out = append(out, s.Name)
		}
		sort.Strings(out)
		return out
	}
	for node, want := range map[string][]string{
		"n1": {"fabric-a", "mixed-a", "mixed-b", "n1-a", "n1-counters"},
		"n2": {"fabric-a", "mixed-a", "mixed-b", "n2-a"},
		"n3": {"fabric-a", "mixed-a", "mixed-b"},
	} {
		if got := names(ns.forNode(node)); !slices.Equal(got, want) {
			t.Errorf("slices for %s: %v, want %v", node, got, want)
		}
	}
}
