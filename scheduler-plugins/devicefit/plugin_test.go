package devicefit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

var features = feature.Features{EnableDynamicResourceAllocation: true, EnableDRAConsumableCapacity: true}

const (
	gpuClass    = "nvidia-gpu.strata.sh"
	sharedClass = "nvidia-shared.strata.sh"
)

func classes() []runtime.Object {
	var out []runtime.Object
	for _, name := range []string{gpuClass, sharedClass} {
		out = append(out, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: `device.driver == "nvidia.strata.sh" && device.attributes["nvidia.strata.sh"].type == "gpu"`,
			}}}},
		})
	}
	return out
}

// sharedSlice is a node with n GPUs that allow several allocations, with
// 100 cores and 16Gi of memory each, memory taken whole by default as
// the NVIDIA plugin publishes them, and a product name.
func sharedSlice(node string, n int, product string) *resourceapi.ResourceSlice {
	s := dct.GPUSlice(node, n)
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		d.Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: ptr.To(product)}
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"cores": {Value: resource.MustParse("100"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default: resource.NewQuantity(0, resource.DecimalSI), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(0, resource.DecimalSI), Step: resource.NewQuantity(1, resource.DecimalSI)}}},
			"memory": {Value: resource.MustParse("16Gi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default: ptr.To(resource.MustParse("16Gi")), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(1<<20, resource.BinarySI), Step: resource.NewQuantity(1<<20, resource.BinarySI)}}},
		}
	}
	return s
}

// share returns claim allocated a share of a GPU of sharedSlice.
func share(name, node string, gpu int, cores, memory string) *resourceapi.ResourceClaim {
	c := testutil.MakeClaimSpec().Request("gpu", sharedClass, 1).Capacity(map[string]string{"cores": cores, "memory": memory}).Claim("default", name)
	c = dct.Allocate(c, node, gpu)
	r := &c.Status.Allocation.Devices.Results[0]
	r.ShareID = ptr.To(types.UID(name + "-share"))
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse(cores), "memory": resource.MustParse(memory)}
	return c
}

// podWith returns a pod using claim.
func podWith(claim *resourceapi.ResourceClaim) *corev1.Pod {
	p := dct.Pod("pod-"+claim.Name, map[corev1.ResourceName]string{corev1.ResourceCPU: "1"})
	p.UID = types.UID("pod-" + claim.Name)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To(claim.Name)}}
	return p
}

func nodeInfos(names ...string) []fwk.NodeInfo {
	var out []fwk.NodeInfo
	for _, n := range names {
		out = append(out, dct.NodeInfo(dct.Node(n, map[corev1.ResourceName]string{corev1.ResourceCPU: "64", corev1.ResourcePods: "110"})))
	}
	return out
}

type handle struct {
	fwk.Handle
	dra     fwk.SharedDRAManager
	factory informers.SharedInformerFactory
}

func (h handle) SharedDRAManager() fwk.SharedDRAManager                 { return h.dra }
func (h handle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }

// newPlugin starts kube-scheduler's DRA manager on objects and the plugin
// on it, and returns once the plugin's index holds them.
func newPlugin(t testing.TB, objects ...runtime.Object) (*Plugin, fwk.SharedDRAManager, *fake.Clientset) {
	t.Helper()
	dra, client, factory := dct.DRA(t.Context(), t, objects...)
	p, err := New(t.Context(), nil, handle{dra: dra, factory: factory}, features)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(t.Context().Done())
	pl := p.(*Plugin)
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return pl.index.Synced(), nil
	}); err != nil {
		t.Fatalf("the plugin's index did not sync: %v", err)
	}
	return pl, dra, client
}

// verdicts runs PreFilter and Filter on every node, the nodes at once as
// kube-scheduler filters them, and returns each node's Filter status, or
// nil when PreFilter skipped the pod.
func verdicts(t *testing.T, p *Plugin, pod *corev1.Pod, nodes []fwk.NodeInfo) (map[string]*fwk.Status, fwk.CycleState) {
	t.Helper()
	cs := framework.NewCycleState()
	res, st := p.PreFilter(t.Context(), cs, pod, nodes)
	if res != nil {
		t.Fatalf("PreFilter narrowed the nodes to %v; it must leave every node to Filter", res.NodeNames)
	}
	if st.IsSkip() {
		return nil, cs
	}
	if !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	out := map[string]*fwk.Status{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ni := range nodes {
		wg.Go(func() {
			st := p.Filter(t.Context(), cs, pod, ni)
			mu.Lock()
			defer mu.Unlock()
			out[ni.Node().Name] = st
		})
	}
	wg.Wait()
	return out, cs
}

func TestWholeGPUs(t *testing.T) {
	pending := testutil.MakeClaimSpec().Request("gpus", gpuClass, 2).Claim("default", "pending")
	objects := append(classes(),
		dct.GPUSlice("full", 2), dct.GPUSlice("one-free", 2), dct.GPUSlice("free", 4),
		dct.Allocate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 2).Claim("default", "a"), "full", 0, 1),
		dct.Allocate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "b"), "one-free", 1),
		pending)
	p, _, _ := newPlugin(t, objects...)
	got, _ := verdicts(t, p, podWith(pending), nodeInfos("full", "one-free", "free", "no-gpus"))
	for node, wantOK := range map[string]bool{"full": false, "one-free": false, "free": true, "no-gpus": false} {
		st := got[node]
		if st.IsSuccess() != wantOK {
			t.Errorf("node %s: %v, want success %v", node, st, wantOK)
		}
		if !wantOK {
			if st.Code() != fwk.Unschedulable {
				t.Errorf("node %s: code %v, want Unschedulable (preemption must still see the node)", node, st.Code())
			}
			if msg := st.Message(); !strings.Contains(msg, "claim pending, request gpus") || !strings.Contains(msg, "needs 2") {
				t.Errorf("node %s: message %q does not name the claim, request and count", node, msg)
			}
		}
	}
}

func TestSharedCapacity(t *testing.T) {
	objects := append(classes(),
		sharedSlice("half", 1, "T4"), sharedSlice("t4", 1, "T4"), sharedSlice("a10", 1, "A10"),
		share("used", "half", 0, "50", "8Gi"))
	shareOf := func(name, cores, memory string, cel ...string) *resourceapi.ResourceClaim {
		return testutil.MakeClaimSpec().Request("gpu", sharedClass, 1, cel...).Capacity(map[string]string{"cores": cores, "memory": memory}).Claim("default", name)
	}
	fits := shareOf("fits", "50", "8Gi")
	tooBig := shareOf("too-big", "60", "4Gi")
	t4Only := shareOf("t4-only", "10", "1Gi", `device.attributes["nvidia.strata.sh"].productName == "T4"`)
	whole := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "whole")
	// A firstAvailable request: 60 cores of an A10, or else 10 of a T4.
	first := testutil.MakeClaimSpec().Request("gpu", sharedClass, 1).Claim("default", "first")
	first.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "a10", DeviceClassName: sharedClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["nvidia.strata.sh"].productName == "A10"`}}},
			Capacity:  &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("60")}}},
		{Name: "t4", DeviceClassName: sharedClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["nvidia.strata.sh"].productName == "T4"`}}},
			Capacity:  &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("10"), "memory": resource.MustParse("1Gi")}}},
	}}
	objects = append(objects, fits, tooBig, t4Only, whole, first)
	p, _, _ := newPlugin(t, objects...)
	nodes := nodeInfos("half", "t4", "a10")
	for _, tc := range []struct {
		claim *resourceapi.ResourceClaim
		want  map[string]bool
	}{
		{fits, map[string]bool{"half": true, "t4": true, "a10": true}},
		{tooBig, map[string]bool{"half": false, "t4": true, "a10": true}},
		{t4Only, map[string]bool{"half": true, "t4": true, "a10": false}},
		// Asking for no memory takes all of it (the default): not beside a share.
		{whole, map[string]bool{"half": false, "t4": true, "a10": true}},
		// The A10 fits its first choice; the half-used T4 fits the second
		// (whose memory it names; the first would take all the memory).
		{first, map[string]bool{"half": true, "t4": true, "a10": true}},
	} {
		got, _ := verdicts(t, p, podWith(tc.claim), nodes)
		for node, wantOK := range tc.want {
			if got[node].IsSuccess() != wantOK {
				t.Errorf("claim %s on node %s: %v, want success %v", tc.claim.Name, node, got[node], wantOK)
			}
		}
	}
}

// Claims the plugin does not check let every node through to the
// allocator.
func TestNotChecked(t *testing.T) {
	all := testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "all")
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	admin := testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "admin")
	admin.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	done := dct.Allocate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "done"), "full", 0)
	noClass := testutil.MakeClaimSpec().Request("gpus", "no-such-class", 1).Claim("default", "no-class")
	network := testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "network")
	// GPUs reachable from any node (a network-attached pool).
	shared := dct.GPUSlice("fabric", 1)
	shared.Name, shared.Spec.NodeName, shared.Spec.AllNodes = "fabric-gpus", nil, ptr.To(true)
	objects := append(classes(), dct.GPUSlice("full", 1), shared, all, admin, done, noClass, network)
	p, _, _ := newPlugin(t, objects...)
	nodes := nodeInfos("full", "no-gpus")
	for _, claim := range []*resourceapi.ResourceClaim{all, admin, done, noClass} {
		if got, _ := verdicts(t, p, podWith(claim), nodes); got != nil {
			t.Errorf("claim %s: PreFilter did not skip the pod; Filter says %v", claim.Name, got)
		}
	}
	missing := podWith(testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "missing"))
	if got, _ := verdicts(t, p, missing, nodes); got != nil {
		t.Errorf("a pod whose claim does not exist was checked: %v", got)
	}
	if got, _ := verdicts(t, p, dct.Pod("no-claims", nil), nodes); got != nil {
		t.Errorf("a pod without claims was checked: %v", got)
	}
	got, _ := verdicts(t, p, podWith(network), nodes)
	for node, st := range got {
		if !st.IsSuccess() {
			t.Errorf("a claim network-attached GPUs can serve was rejected on %s: %v", node, st)
		}
	}
}

// Preemption filters a node again without its victims: a victim with
// claims lets the node through, in the clone of the state only.
func TestRemovePodReopensTheNode(t *testing.T) {
	ctx := t.Context()
	victim := dct.Allocate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "victim"), "full", 0)
	pending := testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "pending")
	objects := append(classes(), dct.GPUSlice("full", 1), victim, pending)
	p, _, _ := newPlugin(t, objects...)
	nodes := nodeInfos("full")
	pod := podWith(pending)
	got, cs := verdicts(t, p, pod, nodes)
	if got["full"].IsSuccess() {
		t.Fatal("the full node was not rejected")
	}
	clone := cs.Clone()
	if st := p.RemovePod(ctx, clone, pod, mustPodInfo(t, dct.Pod("cpu-only", nil)), nodes[0]); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, clone, pod, nodes[0]); st.IsSuccess() {
		t.Error("removing a pod without claims let the node through")
	}
	if st := p.RemovePod(ctx, clone, pod, mustPodInfo(t, podWith(victim)), nodes[0]); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.Filter(ctx, clone, pod, nodes[0]); !st.IsSuccess() {
		t.Errorf("without the victim the node is still rejected: %v", st)
	}
	if st := p.Filter(ctx, cs, pod, nodes[0]); st.IsSuccess() {
		t.Error("RemovePod on a clone changed the cycle's own state")
	}
}

func mustPodInfo(t *testing.T, pod *corev1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

func TestNoArgs(t *testing.T) {
	if _, err := New(t.Context(), &runtime.Unknown{Raw: []byte(`{"threshold": 3}`)}, handle{}, features); err == nil || !strings.Contains(err.Error(), Name) {
		t.Errorf("args were accepted: %v", err)
	}
}

// The plugin never rejects a node the DRA allocator accepts: random
// nodes of whole and shared GPUs of two models, partly in use, and
// random claims, each checked on every node against kube-scheduler's
// structured allocator. The plugin must also reject most of the nodes
// the allocator rejects, or it saves nothing.
func TestNeverRejectsWhatTheAllocatorAccepts(t *testing.T) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(1, 2))
	var rejectedByBoth, rejectedByAllocator, checks int
	for round := range 30 {
		objects, slices, nodes := classes(), []*resourceapi.ResourceSlice{}, []fwk.NodeInfo{}
		for n := range 6 {
			name := fmt.Sprintf("r%d-n%d", round, n)
			gpus := 1 + rng.IntN(4)
			var s *resourceapi.ResourceSlice
			if rng.IntN(2) == 0 {
				s = dct.GPUSlice(name, gpus)
				for i := range s.Spec.Devices {
					s.Spec.Devices[i].Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: ptr.To([]string{"T4", "A10"}[rng.IntN(2)])}
				}
			} else {
				s = sharedSlice(name, gpus, []string{"T4", "A10"}[rng.IntN(2)])
			}
			slices = append(slices, s)
			objects = append(objects, s)
			nodes = append(nodes, nodeInfos(name)...)
			for g := range gpus {
				switch k := rng.IntN(4); {
				case k == 0 && s.Spec.Devices[g].AllowMultipleAllocations == nil:
					objects = append(objects, dct.Allocate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", fmt.Sprintf("%s-used-%d", name, g)), name, g))
				case k > 0 && s.Spec.Devices[g].AllowMultipleAllocations != nil:
					for j := range rng.IntN(3) {
						objects = append(objects, share(fmt.Sprintf("%s-share-%d-%d", name, g, j), name, g, fmt.Sprint(10*(1+rng.IntN(5))), fmt.Sprintf("%dGi", 1+rng.IntN(6))))
					}
				}
			}
		}
		var pending []*resourceapi.ResourceClaim
		for c := range 8 {
			name := fmt.Sprintf("r%d-pending-%d", round, c)
			var sel []string
			if rng.IntN(3) == 0 {
				sel = []string{`device.attributes["nvidia.strata.sh"].productName == "T4"`}
			}
			var claim *resourceapi.ResourceClaim
			if rng.IntN(2) == 0 {
				claim = testutil.MakeClaimSpec().Request("gpu", gpuClass, int64(1+rng.IntN(3)), sel...).Claim("default", name)
			} else {
				claim = testutil.MakeClaimSpec().Request("gpu", sharedClass, 1, sel...).Capacity(map[string]string{
					"cores": fmt.Sprint(10 * (1 + rng.IntN(9))), "memory": fmt.Sprintf("%dGi", 1+rng.IntN(15)),
				}).Claim("default", name)
			}
			pending = append(pending, claim)
			objects = append(objects, claim)
		}
		p, dra, _ := newPlugin(t, objects...)
		allocated, err := dra.ResourceClaims().GatherAllocatedState()
		if err != nil {
			t.Fatal(err)
		}
		for _, claim := range pending {
			got, _ := verdicts(t, p, podWith(claim), nodes)
			for _, ni := range nodes {
				checks++
				ok := allocates(ctx, t, dra, allocated, slices, ni.Node(), claim)
				switch {
				case ok && !got[ni.Node().Name].IsSuccess():
					t.Errorf("claim %s on node %s: the allocator allocates it, the plugin says %v", claim.Name, ni.Node().Name, got[ni.Node().Name])
				case !ok:
					rejectedByAllocator++
					if !got[ni.Node().Name].IsSuccess() {
						rejectedByBoth++
					}
				}
			}
		}
	}
	t.Logf("%d checks: the allocator rejected %d, the plugin %d of them", checks, rejectedByAllocator, rejectedByBoth)
	if rejectedByAllocator == 0 || rejectedByBoth*10 < rejectedByAllocator*9 {
		t.Errorf("the plugin rejected %d of the %d nodes the allocator rejects, want at least 90 %%", rejectedByBoth, rejectedByAllocator)
	}
}

// allocates tells whether kube-scheduler's allocator allocates claim on
// node, with the features DynamicResources gives it.
func allocates(ctx context.Context, t *testing.T, dra fwk.SharedDRAManager, allocated *structured.AllocatedState, slices []*resourceapi.ResourceSlice, node *corev1.Node, claim *resourceapi.ResourceClaim) bool {
	t.Helper()
	a, err := structured.NewAllocator(ctx, dynamicresources.AllocatorFeatures(features), *allocated, dra.DeviceClasses(), slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("allocate %s on %s: %v", claim.Name, node.Name, err)
	}
	return len(res) > 0
}

// BenchmarkPreFilter is a pod's PreFilter on the shape of upstream's
// SchedulingWithResourceClaimTemplate workloads: nodes of 10 GPUs, half
// of them allocated, one claim to check (a whole GPU, or a share), at
// 500 and 5,000 nodes.
func BenchmarkPreFilter(b *testing.B) {
	for _, nodes := range benchNodes {
		for _, shared := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dnodes/%s", nodes, benchName(shared)), func(b *testing.B) {
				p, pod, nodes := benchCluster(b, shared, nodes)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, st := p.PreFilter(b.Context(), framework.NewCycleState(), pod, nodes); !st.IsSuccess() {
						b.Fatal(st)
					}
				}
			})
		}
	}
}

// BenchmarkFilter is a pod's PreFilter and then Filter on each node of
// BenchmarkPreFilter, one after the other: the plugin's whole cost for a
// pod when kube-scheduler searches every node.
func BenchmarkFilter(b *testing.B) {
	for _, nodes := range benchNodes {
		for _, shared := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dnodes/%s", nodes, benchName(shared)), func(b *testing.B) {
				p, pod, nodes := benchCluster(b, shared, nodes)
				// Warm up: selectors evaluated once per slice, as they are
				// in a scheduler that has run a while.
				cs := framework.NewCycleState()
				p.PreFilter(b.Context(), cs, pod, nodes)
				for _, ni := range nodes {
					p.Filter(b.Context(), cs, pod, ni)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					cs := framework.NewCycleState()
					if _, st := p.PreFilter(b.Context(), cs, pod, nodes); !st.IsSuccess() {
						b.Fatal(st)
					}
					for _, ni := range nodes {
						if st := p.Filter(b.Context(), cs, pod, ni); !st.IsSuccess() {
							b.Fatal(st)
						}
					}
				}
			})
		}
	}
}

// benchNodes are the cluster sizes of the benchmarks.
var benchNodes = []int{500, 5000}

func benchName(shared bool) string {
	if shared {
		return "shared"
	}
	return "whole"
}

// benchCluster makes the benchmarks' nodes of 10 GPUs, five of each
// node's GPUs held (whole, or a share each), and the pod's claim.
func benchCluster(b *testing.B, shared bool, nodes int) (*Plugin, *corev1.Pod, []fwk.NodeInfo) {
	objects := classes()
	var names []string
	for n := range nodes {
		node := fmt.Sprintf("node-%d", n)
		names = append(names, node)
		if shared {
			objects = append(objects, sharedSlice(node, 10, "A100"))
			for g := range 5 {
				objects = append(objects, share(fmt.Sprintf("%s-held-%d", node, g), node, g, "50", "8Gi"))
			}
			continue
		}
		objects = append(objects, dct.GPUSlice(node, 10))
		for g := range 5 {
			objects = append(objects, dct.Allocate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", fmt.Sprintf("%s-held-%d", node, g)), node, g))
		}
	}
	claim := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "new")
	if shared {
		claim = testutil.MakeClaimSpec().Request("gpu", sharedClass, 1).Capacity(map[string]string{"cores": "30", "memory": "4Gi"}).Claim("default", "new")
	}
	objects = append(objects, claim)
	p, _, _ := newPlugin(b, objects...)
	return p, podWith(claim), nodeInfos(names...)
}
