package fragscore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/api/schedulerargs"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/fragment"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

var features = feature.Features{EnableDynamicResourceAllocation: true, EnableDRAConsumableCapacity: true}

func gpuClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-gpu.strata.sh"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "nvidia.strata.sh"`,
		}}}},
	}
}

// claimFor returns a claim for n whole GPUs and a pod using it.
func claimFor(name string, n int64, cpu string) (*resourceapi.ResourceClaim, *corev1.Pod) {
	c := testutil.MakeClaimSpec().Request("gpus", "nvidia-gpu.strata.sh", n).Claim("default", name)
	c.UID = types.UID("uid-" + name)
	p := dct.Pod(name, map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: "1Gi"})
	p.UID = types.UID("pod-" + name)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(name)}}
	return c, p
}

func nodeInfos(names ...string) []fwk.NodeInfo {
	var out []fwk.NodeInfo
	for _, n := range names {
		cpu := "64"
		if n == "c-starved" {
			cpu = "2"
		}
		out = append(out, dct.NodeInfo(dct.Node(n, map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: "256Gi", corev1.ResourcePods: "110"})))
	}
	return out
}

// Where two-GPU pods are expected, a one-GPU pod goes to the node whose
// other GPU is already taken, not to a node it would break.
func TestOneGPUPodKeepsAPairWhole(t *testing.T) {
	ctx := context.Background()
	held, _ := claimFor("held", 1, "1")
	held = dct.Allocate(held, "a-half", 0)
	pending, pod := claimFor("one", 1, "4")
	m := dct.DRAManager(ctx, t, gpuClass(), dct.GPUSlice("a-half", 2), dct.GPUSlice("b-free", 2), dct.GPUSlice("c-starved", 2), held, pending)
	p := withManager(t, m)
	for i := 0; i < 10; i++ {
		p.observe(types.UID(string(rune('a'+i))), fragment.Task{CPU: 8000, GPUs: 2, Milli: fragment.Whole})
	}
	nodes := nodeInfos("a-half", "b-free", "c-starved")
	st, err := p.measure(ctx, nil, pod, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if !(st.raw["a-half"] > st.raw["b-free"]) {
		t.Errorf("raw scores %v; want a-half above b-free", st.raw)
	}
	// The pod does not fit the starved node's CPU: the lowest score.
	if !(st.raw["c-starved"] < st.raw["b-free"]) {
		t.Errorf("raw scores %v; want c-starved lowest", st.raw)
	}
	scores := fwk.NodeScoreList{{Name: "b-free", Score: st.raw["b-free"]}, {Name: "a-half", Score: st.raw["a-half"]}, {Name: "c-starved", Score: st.raw["c-starved"]}}
	if s := p.NormalizeScore(ctx, nil, pod, scores); !s.IsSuccess() {
		t.Fatal(s)
	}
	if scores[1].Score != 100 || scores[0].Score != 99 || scores[2].Score != 98 {
		t.Errorf("normalized %v, want a-half 100, b-free 99, c-starved 98", scores)
	}
}

// Equal raw scores rank by node name: the first node in name order wins.
func TestTiesRankByName(t *testing.T) {
	p := &Plugin{}
	scores := fwk.NodeScoreList{{Name: "n-2", Score: 5}, {Name: "n-0", Score: 5}, {Name: "n-1", Score: 7}}
	p.NormalizeScore(context.Background(), nil, nil, scores)
	if scores[2].Score != 100 || scores[1].Score != 99 || scores[0].Score != 98 {
		t.Errorf("normalized %v, want n-1, n-0, n-2", scores)
	}
}

// A share's free part is the less of cores and memory left.
func TestFreeShare(t *testing.T) {
	ctx := context.Background()
	slice := dct.GPUSlice("n", 1)
	slice.Spec.Devices[0].AllowMultipleAllocations = ptr.To(true)
	slice.Spec.Devices[0].Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"cores":  {Value: resource.MustParse("100")},
		"memory": {Value: resource.MustParse("16Gi")},
	}
	claim := testutil.MakeClaimSpec().Request("gpus", "nvidia-gpu.strata.sh", 1).Claim("default", "share")
	claim.UID = "uid-share"
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpus", Driver: dct.GPUDriver, Pool: "n", Device: dct.GPUName("n", 0), ShareID: ptr.To(types.UID("s1")),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("30"), "memory": resource.MustParse("8Gi")},
	}}}}
	m := dct.DRAManager(ctx, t, gpuClass(), slice, claim)
	c := newCounter(m)
	classes := []*resourceapi.DeviceClass{gpuClass()}
	devs, err := c.Devices(ctx, classesOf(classes), gpus, nodeInfos("n"))
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := c.AllocatedState(nil)
	if err != nil {
		t.Fatal(err)
	}
	// 70 % of the cores and half the memory left: 500 milli.
	if n := nodeView(nodeInfos("n")[0], devs["n"], nil, alloc); len(n.GPUs) != 1 || n.GPUs[0] != 500 {
		t.Errorf("GPUs %v, want one with 500 milli free", n.GPUs)
	}
}

func TestArgsAreValidated(t *testing.T) {
	bad := &schedulerargs.StrataFragmentationArgs{DeviceClasses: []string{"Not_A_Class"}, CoveragePercent: 120}
	_, err := New(context.Background(), bad, nil, features)
	if err == nil || !strings.Contains(err.Error(), "deviceClasses[0]") || !strings.Contains(err.Error(), "coveragePercent") {
		t.Errorf("New with bad args: %v, want errors naming deviceClasses[0] and coveragePercent", err)
	}
	// A class is the GPUs' or their MIG placements', not both.
	both := &schedulerargs.StrataFragmentationArgs{MIGDeviceClasses: []string{"nvidia-gpu.strata.sh"}}
	if _, err := New(context.Background(), both, nil, features); err == nil || !strings.Contains(err.Error(), "migDeviceClasses[0]") {
		t.Errorf("New with a class listed twice: %v, want an error naming migDeviceClasses[0]", err)
	}
	if _, err := New(context.Background(), nil, nil, features); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}

func newCounter(dra fwk.SharedDRAManager) *devicecount.Counter {
	return devicecount.New(dra, []corev1.ResourceName{gpus}, features)
}

func classesOf(c []*resourceapi.DeviceClass) devicecount.Classes { return devicecount.Classes{gpus: c} }

func migClassesOf(c []*resourceapi.DeviceClass) devicecount.Classes {
	return devicecount.Classes{migs: c}
}

// withManager returns the plugin with default args, reading a DRA
// manager.
func withManager(t testing.TB, m fwk.SharedDRAManager) *Plugin {
	t.Helper()
	pl, err := New(t.Context(), nil, nil, features)
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*Plugin)
	p.dra = m
	p.devices = newCounter(m)
	return p
}

// Pods without claims are signed by their requests, so that a profile
// with the plugin keeps kube-scheduler's batching; pods with claims are
// not signable.
func TestSignPod(t *testing.T) {
	pl, err := New(t.Context(), nil, nil, features)
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*Plugin)
	cpu := dct.Pod("cpu", map[corev1.ResourceName]string{corev1.ResourceCPU: "2"})
	frags, st := p.SignPod(t.Context(), cpu)
	if !st.IsSuccess() || len(frags) != 1 || frags[0].Key != devicecount.RequestsSignerName {
		t.Fatalf("CPU pod: fragments %v, status %v", frags, st)
	}
	if got := frags[0].Value.(corev1.ResourceList)[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("signed CPU %v, want 2", got.String())
	}
	_, gpuPod := claimFor("one", 1, "1")
	if _, st := p.SignPod(t.Context(), gpuPod); st.IsSuccess() {
		t.Error("a pod with a claim was signed")
	}
}

// A GPU one of whose MIG placements is allocated is not free for whole
// GPUs or shares; its sibling, whose placements are idle, is.
func TestMIGInstanceHoldsItsGPU(t *testing.T) {
	ctx := context.Background()
	slice := dct.GPUSlice("n", 2)
	for g := range 2 {
		set := fmt.Sprintf("gpu-%d-counters", g)
		slice.Spec.Devices[g].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{
			"memory-slice-0": {Value: resource.MustParse("1")}, "memory-slice-1": {Value: resource.MustParse("1")},
		}}}
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{
			Name:       fmt.Sprintf("gpu-%d-mig-1g-0", g),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("mig")}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{
				"memory-slice-0": {Value: resource.MustParse("1")},
			}}},
		})
	}
	mig := testutil.MakeClaimSpec().Request("mig", "nvidia-mig.strata.sh", 1).Claim("default", "mig")
	mig.UID = "uid-mig"
	mig.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "mig", Driver: dct.GPUDriver, Pool: "n", Device: "gpu-0-mig-1g-0",
	}}}}
	// The chart's class selects whole GPUs, not MIG instances.
	class := gpuClass()
	class.Spec.Selectors[0].CEL.Expression = `device.attributes["nvidia.strata.sh"].type == "gpu"`
	m := dct.DRAManager(ctx, t, class, slice, mig)
	c := newCounter(m)
	devs, err := c.Devices(ctx, classesOf([]*resourceapi.DeviceClass{class}), gpus, nodeInfos("n"))
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := c.AllocatedState(nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := nodeView(nodeInfos("n")[0], devs["n"], nil, alloc); !cmp.Equal(n.GPUs, []int32{0, fragment.Whole}) {
		t.Errorf("free GPUs %v, want [0 %d]: GPU 0 holds an allocated MIG instance", n.GPUs, fragment.Whole)
	}
}
