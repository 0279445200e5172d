package devicecount_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

const (
	gpuClass = "nvidia-gpu.strata.sh"
	gpuName  = corev1.ResourceName("nvidia.com/gpu")
)

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func classes(tb testing.TB, names ...string) []runtime.Object {
	all := testutil.StrataClasses(tb)
	var out []runtime.Object
	for _, n := range names {
		c := all[n].DeepCopy()
		c.ResourceVersion = "1"
		out = append(out, c)
	}
	return out
}

func newCounter(ctx context.Context, t *testing.T, names []corev1.ResourceName, objects ...runtime.Object) *devicecount.Counter {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	return devicecount.New(dct.DRAManager(ctx, t, objects...), names, fts)
}

func TestClasses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	objs := classes(t, gpuClass, "rdma-nic.strata.sh")
	tests := map[string]struct {
		names []corev1.ResourceName
		want  map[corev1.ResourceName][]string
	}{
		"by extendedResourceName": {names: []corev1.ResourceName{gpuName, "cpu"}, want: map[corev1.ResourceName][]string{gpuName: {gpuClass}}},
		"by class name":           {names: []corev1.ResourceName{gpuClass}, want: map[corev1.ResourceName][]string{gpuClass: {gpuClass}}},
		"by implicit extended resource name": {
			names: []corev1.ResourceName{"deviceclass.resource.kubernetes.io/" + gpuClass},
			want:  map[corev1.ResourceName][]string{"deviceclass.resource.kubernetes.io/" + gpuClass: {gpuClass}},
		},
		"no class: no DRA work": {names: []corev1.ResourceName{"cpu", "memory", "example.com/foo"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := newCounter(ctx, t, tc.names, objs...).Classes()
			if err != nil {
				t.Fatal(err)
			}
			var gotNames map[corev1.ResourceName][]string
			for n, cs := range got {
				if gotNames == nil {
					gotNames = map[corev1.ResourceName][]string{}
				}
				for _, c := range cs {
					gotNames[n] = append(gotNames[n], c.Name)
				}
			}
			if diff := cmp.Diff(tc.want, gotNames); diff != "" {
				t.Errorf("classes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	claim := testutil.MakeClaimSpec().Request("gpu", gpuClass, 6).Claim("default", "busy")
	stale := dct.GPUSlice("node-c", 4)
	stale.Name, stale.Spec.Pool.Generation = "node-c-old", 0
	fresh := dct.GPUSlice("node-c", 2)
	fresh.Spec.Pool.Generation = 1
	network := dct.GPUSlice("rack", 2)
	network.Spec.NodeName, network.Spec.NodeSelector = nil, &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}},
	}}}
	nic := dct.GPUSlice("node-a", 1)
	nic.Name, nic.Spec.Driver, nic.Spec.Pool.Name = "node-a-nics", "rdma.strata.sh", "node-a-nics"
	shared := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "shared")
	shared = dct.Allocate(shared, "node-b", 0)
	shared.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("share-1"))

	objs := append(classes(t, gpuClass, "rdma-nic.strata.sh"),
		dct.GPUSlice("node-a", 8), dct.GPUSlice("node-b", 8), stale, fresh, network, nic,
		dct.Allocate(claim, "node-a", dct.Indexes(6)...), shared)
	c := newCounter(ctx, t, []corev1.ResourceName{gpuName, "cpu"}, objs...)
	cls, err := c.Classes()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []fwk.NodeInfo{
		dct.NodeInfo(node("node-a", map[string]string{"rack": "r1"})),
		dct.NodeInfo(node("node-b", nil)),
		dct.NodeInfo(node("node-c", nil)),
		dct.NodeInfo(node("node-d", nil)),
	}
	want := map[string]devicecount.NodeCount{
		"node-a": {Allocatable: 10, Allocated: 6}, // 8 local + 2 on the rack; the NIC is no GPU
		"node-b": {Allocatable: 8, Allocated: 1},  // a share counts as allocated
		"node-c": {Allocatable: 2},                // only the newest generation
		"node-d": {},
	}
	for round := range 2 { // the second round answers from the selection cache
		counts, err := c.Nodes(ctx, nil, cls, nodes, true)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]devicecount.NodeCount{}
		for _, ni := range nodes {
			got[ni.Node().Name] = counts.Get(ni.Node().Name, gpuName)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round %d: counts (-want +got):\n%s", round, diff)
		}
		if n := counts.Get("node-a", "cpu"); n != (devicecount.NodeCount{}) {
			t.Errorf("cpu is no class, counted %+v", n)
		}
	}
	counts, err := c.Nodes(ctx, nil, cls, nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := counts.Get("node-a", gpuName); got != (devicecount.NodeCount{Allocatable: 10}) {
		t.Errorf("without allocated: %+v", got)
	}
}

func TestDemand(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	spec := testutil.MakeClaimSpec
	firstAvailable := spec().Claim("default", "either")
	firstAvailable.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
		{Name: "small", DeviceClassName: "nvidia-mig.strata.sh", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}}
	all := spec().Request("gpu", gpuClass, 0).Claim("default", "all")
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	admin := spec().Request("gpu", gpuClass, 1).Claim("default", "admin")
	admin.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	objs := append(classes(t, gpuClass, "nvidia-mig.strata.sh", "rdma-nic.strata.sh"),
		spec().Request("gpu", gpuClass, 1).Request("nic", "rdma-nic.strata.sh", 1).Claim("default", "one"),
		spec().Request("gpu", gpuClass, 3).Claim("default", "pod-gen-gpu"),
		dct.Allocate(spec().Request("gpu", gpuClass, 2).Claim("default", "done"), "node-a", 0, 1),
		firstAvailable, all, admin,
	)
	c := newCounter(ctx, t, []corev1.ResourceName{gpuName}, objs...)
	cls, err := c.Classes()
	if err != nil {
		t.Fatal(err)
	}
	templated := testutil.MakePod("gen").ClaimTemplate("gen", "tmpl").Obj()
	templated.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gen", ResourceClaimName: ptr.To("pod-gen-gpu")}}
	tests := map[string]struct {
		pod                 *corev1.Pod
		devices             int64
		all, used           bool
		onFree, onHalfTaken int64
	}{
		"no claims":                        {pod: testutil.MakePod("cpu").Req("1", "1Gi").Obj()},
		"claim by name":                    {pod: testutil.MakePod("p").Claim("c", "one").Obj(), devices: 1, used: true, onFree: 1, onHalfTaken: 1},
		"claim from a template":            {pod: templated, devices: 3, used: true, onFree: 3, onHalfTaken: 3},
		"template claim not generated yet": {pod: testutil.MakePod("p").ClaimTemplate("c", "tmpl").Obj()},
		"claim not in the cache yet":       {pod: testutil.MakePod("p").Claim("c", "missing").Obj()},
		"allocated claim adds nothing":     {pod: testutil.MakePod("p").Claim("c", "done").Obj(), used: true},
		"first alternative":                {pod: testutil.MakePod("p").Claim("c", "either").Obj(), devices: 2, used: true, onFree: 2, onHalfTaken: 2},
		"all devices":                      {pod: testutil.MakePod("p").Claim("c", "all").Obj(), all: true, used: true, onFree: 8, onHalfTaken: 4},
		"admin access takes nothing":       {pod: testutil.MakePod("p").Claim("c", "admin").Obj()},
		"two claims add up":                {pod: testutil.MakePod("p").Claim("a", "one").Claim("b", "either").Obj(), devices: 3, used: true, onFree: 3, onHalfTaken: 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := c.Demand(tc.pod, cls)
			if err != nil {
				t.Fatal(err)
			}
			got := []any{d.Devices[gpuName], d.All.Has(gpuName), d.Used.Has(gpuName),
				d.On(gpuName, devicecount.NodeCount{Allocatable: 8}), d.On(gpuName, devicecount.NodeCount{Allocatable: 8, Allocated: 4})}
			want := []any{tc.devices, tc.all, tc.used, tc.onFree, tc.onHalfTaken}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[devices all used onFree onHalfTaken] (-want +got):\n%s", diff)
			}
			if extra := d.Used.Difference(sets.New(gpuName)); extra.Len() > 0 {
				t.Errorf("names outside the counter's: %v", extra.UnsortedList())
			}
		})
	}
}

func TestSignPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newCounter(ctx, t, []corev1.ResourceName{gpuName, "cpu"}, classes(t, gpuClass)...)
	noDRA := newCounter(ctx, t, []corev1.ResourceName{"example.com/gpu", "cpu"}, classes(t, gpuClass)...)
	cpu := dct.Pod("cpu", map[corev1.ResourceName]string{"cpu": "1"})
	mapped := dct.Pod("mapped", map[corev1.ResourceName]string{"cpu": "1", gpuName: "1"})
	tests := map[string]struct {
		c        *devicecount.Counter
		pod      *corev1.Pod
		signable bool
	}{
		"CPU pod":                             {c: c, pod: cpu, signable: true},
		"pod with a claim":                    {c: c, pod: testutil.MakePod("p").Claim("gpu", "one").Obj()},
		"extended resource → DRA":             {c: c, pod: mapped},
		"extended resource, no class maps it": {c: noDRA, pod: dct.Pod("p", map[corev1.ResourceName]string{"example.com/gpu": "1"}), signable: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			requests := tc.pod.Spec.Containers[0].Resources.Requests
			frags, st := tc.c.SignPod(tc.pod, requests)
			if got := st.IsSuccess(); got != tc.signable {
				t.Fatalf("signable = %v (%v), want %v", got, st, tc.signable)
			}
			if tc.signable {
				want := []fwk.SignFragment{{Key: devicecount.RequestsSignerName, Value: requests}}
				if diff := cmp.Diff(want, frags); diff != "" {
					t.Errorf("fragments (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// A scheduling cycle reads one allocated state, gathered by the first
// plugin that asks; the next cycle gathers afresh.
func TestGatherAllocatedOncePerCycle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	first := dct.Allocate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "first"), "node-a", 0)
	pending := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "second")
	pending.UID = "default/second"
	m := dct.DRAManager(ctx, t, append(classes(t, gpuClass), dct.GPUSlice("node-a", 8), first, pending)...)
	tracker := devicecount.NewAllocated(m, true)
	cycle := framework.NewCycleState()
	before, err := devicecount.GatherAllocated(cycle, tracker)
	if err != nil {
		t.Fatal(err)
	}
	// Another pod's allocation goes in flight during the cycle.
	second := dct.Allocate(pending, "node-a", 1)
	if err := m.ResourceClaims().SignalClaimPendingAllocation(second.UID, second); err != nil {
		t.Fatal(err)
	}
	again, err := devicecount.GatherAllocated(cycle, tracker)
	if err != nil {
		t.Fatal(err)
	}
	if again != before {
		t.Errorf("the cycle's second call gathered again")
	}
	gpu := func(i int) structured.DeviceID {
		return structured.MakeDeviceID(dct.GPUDriver, "node-a", dct.GPUName("node-a", i))
	}
	if !again.AllocatedDevices.Has(gpu(0)) || again.AllocatedDevices.Has(gpu(1)) {
		t.Errorf("within the cycle: allocated %v, want only GPU 0", again.AllocatedDevices.UnsortedList())
	}
	for name, cs := range map[string]fwk.CycleState{"next cycle": framework.NewCycleState(), "no cycle": nil} {
		fresh, err := devicecount.GatherAllocated(cs, tracker)
		if err != nil {
			t.Fatal(err)
		}
		if !fresh.AllocatedDevices.Has(gpu(0)) || !fresh.AllocatedDevices.Has(gpu(1)) {
			t.Errorf("%s: allocated %v, want GPUs 0 and 1", name, fresh.AllocatedDevices.UnsortedList())
		}
	}
}

// A node's devices come in the order the allocator tries them, which
// the slices' listing order does not give: pools by name, a pool's
// slices by name, each slice's devices in order.
func TestDevicesInAllocatorOrder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var objs []runtime.Object
	for _, name := range []string{"n-d", "n-b", "n-c", "n-a"} {
		s := dct.GPUSlice("n", 2)
		s.Name, s.Spec.Pool.ResourceSliceCount = name, 4
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Name = fmt.Sprintf("%s-%d", name, i)
		}
		objs = append(objs, s)
	}
	other := dct.GPUSlice("n", 1)
	other.Name, other.Spec.Pool.Name, other.Spec.Devices[0].Name = "m-first", "a-pool", "other-0"
	objs = append(objs, other)
	c := newCounter(ctx, t, []corev1.ResourceName{gpuName}, append(objs, classes(t, gpuClass)...)...)
	list, err := c.Classes()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []fwk.NodeInfo{dct.NodeInfo(node("n", nil))}
	want := []string{"other-0", "n-a-0", "n-a-1", "n-b-0", "n-b-1", "n-c-0", "n-c-1", "n-d-0", "n-d-1"}
	for range 10 {
		devs, err := c.Devices(ctx, list, gpuName, nodes)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range devs["n"] {
			got = append(got, d.Device.Name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("devices %v, want %v", got, want)
		}
	}
}
