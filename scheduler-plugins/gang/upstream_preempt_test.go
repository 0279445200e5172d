package gang

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

const (
	upstreamGPUClass = "nvidia-gpu.strata.sh"
	lowPriority      = int32(1)
	highPriority     = int32(100)
)

// preemptHandle is the framework as job-level preemption sees it: the
// fake handle's waiting pods and queue, a snapshot of the bound pods,
// kube-scheduler's DRA manager and an API to evict through.
type preemptHandle struct {
	*fakeHandle
	snap fwk.SharedLister
	dra  fwk.SharedDRAManager
	cs   kubernetes.Interface
}

func (h *preemptHandle) SnapshotSharedLister() fwk.SharedLister { return h.snap }
func (h *preemptHandle) SharedDRAManager() fwk.SharedDRAManager { return h.dra }
func (h *preemptHandle) ClientSet() kubernetes.Interface        { return h.cs }

// groupInfo is an upstream PodGroup in a pod-group cycle.
type groupInfo struct {
	fwk.PodGroupInfo
	pg   *schedulingv1beta1.PodGroup
	pods []*corev1.Pod
}

func (g groupInfo) GetUnscheduledPods() []*corev1.Pod                           { return g.pods }
func (g groupInfo) GetPodGroup() *schedulingv1beta1.PodGroup                    { return g.pg }
func (g groupInfo) GetCompositePodGroup() *schedulingv1alpha3.CompositePodGroup { return nil }
func (g groupInfo) GetChildren() []fwk.PodGroupInfo                             { return nil }
func (g groupInfo) GetNamespace() string                                        { return g.pg.Namespace }
func (g groupInfo) GetName() string                                             { return g.pg.Name }
func (g groupInfo) GetKey() string                                              { return g.pg.Namespace + "/" + g.pg.Name }

// compositeInfo is a CompositePodGroup at the root of a cycle.
type compositeInfo struct{ groupInfo }

func (compositeInfo) GetPodGroup() *schedulingv1beta1.PodGroup { return nil }

// gpuCluster is a cluster of 8-GPU nodes, with pods, their claims and
// upstream PodGroups.
type gpuCluster struct {
	nodes  []*corev1.Node
	pods   []*corev1.Pod
	claims []*resourceapi.ResourceClaim
	groups []*schedulingv1beta1.PodGroup
}

// node adds an 8-GPU node with labels.
func (c *gpuCluster) node(name string, labels map[string]string) {
	n := dct.Node(name, map[corev1.ResourceName]string{corev1.ResourceCPU: "64", corev1.ResourceMemory: "256Gi", corev1.ResourcePods: "110"})
	n.Labels = labels
	c.nodes = append(c.nodes, n)
}

// holder adds a low-priority pod bound to node with a claim allocated
// the node's GPUs of the given indexes; group "" makes it a lone pod.
func (c *gpuCluster) holder(name, node, group string, gpus ...int) {
	pod := testutil.MakePod(name).Req("1", "1Gi").Claim("gpus", name+"-gpus").Obj()
	pod.UID = types.UID(name)
	pod.Spec.NodeName = node
	pod.Spec.Priority = ptr.To(lowPriority)
	if group != "" {
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	}
	claim := dct.Allocate(testutil.MakeClaimSpec().Request("gpus", upstreamGPUClass, int64(len(gpus))).Claim("default", name+"-gpus"), node, gpus...)
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
	c.pods = append(c.pods, pod)
	c.claims = append(c.claims, claim)
}

// member adds a pending high-priority pod of an upstream group with an
// unallocated claim for gpus GPUs (none without).
func (c *gpuCluster) member(name, group string, gpus int) *corev1.Pod {
	w := testutil.MakePod(name).Req("1", "1Gi")
	if gpus > 0 {
		w = w.Claim("gpus", name+"-gpus")
		c.claims = append(c.claims, testutil.MakeClaimSpec().Request("gpus", upstreamGPUClass, int64(gpus)).Claim("default", name+"-gpus"))
	}
	pod := w.Obj()
	pod.UID = types.UID(name)
	pod.Spec.Priority = ptr.To(highPriority)
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	c.pods = append(c.pods, pod)
	return pod
}

// group adds an upstream PodGroup of minCount pods.
func (c *gpuCluster) group(name string, minCount int32, mutate ...func(*schedulingv1beta1.PodGroupSpec)) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("pg-" + name)},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}}}
	for _, m := range mutate {
		m(&pg.Spec)
	}
	c.groups = append(c.groups, pg)
	return pg
}

// start builds the plugin over the cluster: kube-scheduler's DRA manager
// on the claims and slices, a snapshot of the bound pods, the upstream
// PodGroups, and a fake API holding the pods.
func (c *gpuCluster) start(t *testing.T) (*Plugin, *fake.Clientset) {
	t.Helper()
	registerPreemptionMetrics()
	objs := []runtime.Object{&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: upstreamGPUClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + dct.GPUDriver + `"`}}}}}}
	for _, n := range c.nodes {
		objs = append(objs, dct.GPUSlice(n.Name, 8))
	}
	for _, claim := range c.claims {
		objs = append(objs, claim)
	}
	for _, pod := range c.pods {
		objs = append(objs, pod)
	}
	dra, cs, _ := dct.DRA(t.Context(), t, objs...)
	p, h := newTestPlugin(t, c.pods)
	var bound []*corev1.Pod
	for _, pod := range c.pods {
		if pod.Spec.NodeName != "" {
			bound = append(bound, pod)
		}
	}
	p.handle = &preemptHandle{fakeHandle: h, snap: schedcache.NewSnapshot(bound, c.nodes), dra: dra, cs: cs}
	p.capacity = newCapacityEstimator(dra, feature.Features{EnableDRAConsumableCapacity: true})
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, pg := range c.groups {
		if err := idx.Add(pg); err != nil {
			t.Fatal(err)
		}
	}
	p.upstream = schedulinglisters.NewPodGroupLister(idx)
	return p, cs
}

// evicted waits until the named pods are gone from the API, and checks
// that the others are still there.
func evicted(t *testing.T, cs *fake.Clientset, gone []string, kept ...string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range gone {
			if _, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("pods %v not evicted: %v", gone, err)
	}
	for _, name := range kept {
		if _, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s evicted (%v); it frees nothing the group needs", name, err)
		}
	}
}

func nominations(res *fwk.PodGroupPostFilterResult) map[string]string {
	out := map[string]string{}
	if res == nil {
		return out
	}
	for name, ni := range res.NominatingInfos {
		if ni.Mode() == fwk.ModeOverride {
			out[name.Name] = ni.NominatedNodeName
		}
	}
	return out
}

// TestUpstreamGroupPreemptsGPUHolders: a high-priority upstream group of
// two members needing 4 GPUs each, on an 8-GPU node held by two
// low-priority pods. The in-tree pod-group preemption frees no device;
// StrataGang counts the holders' GPUs as freed, evicts both, and
// nominates both members to the node, never the CPU-only pod. While the
// holders terminate, the next cycle evicts nothing more and keeps the
// members' nominations; pods of lower priority are kept off the node.
func TestUpstreamGroupPreemptsGPUHolders(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var c gpuCluster
	c.node("node-a", nil)
	c.holder("holder-0", "node-a", "", 0, 1, 2, 3)
	c.holder("holder-1", "node-a", "", 4, 5, 6, 7)
	cpuOnly := testutil.MakePod("cpu-only").Req("1", "1Gi").Obj()
	cpuOnly.UID, cpuOnly.Spec.NodeName, cpuOnly.Spec.Priority = "cpu-only", "node-a", ptr.To(lowPriority)
	c.pods = append(c.pods, cpuOnly)
	pg := c.group("hp", 2)
	members := []*corev1.Pod{c.member("hp-0", "hp", 4), c.member("hp-1", "hp", 4)}
	p, cs := c.start(t)

	res, st := p.PodGroupPostFilter(ctx, nil, groupInfo{pg: pg, pods: members}, nil)
	if !st.IsSuccess() {
		t.Fatalf("PodGroupPostFilter = %v, want Success", st)
	}
	want := map[string]string{"hp-0": "node-a", "hp-1": "node-a"}
	if got := nominations(res); !maps.Equal(got, want) {
		t.Errorf("nominations %v, want %v", got, want)
	}
	evicted(t, cs, []string{"holder-0", "holder-1"}, "cpu-only")
	if holder := p.reservedFor("node-a", lowPriority, ""); holder != "default/hp" {
		t.Errorf("node-a reserved for %q against low-priority pods, want default/hp", holder)
	}

	// The scheduler wrote the nominations; the holders are still in the
	// snapshot, terminating.
	for _, m := range members {
		cur := m.DeepCopy()
		cur.Status.NominatedNodeName = "node-a"
		if err := p.podIndex.Update(cur); err != nil {
			t.Fatal(err)
		}
	}
	res, st = p.PodGroupPostFilter(ctx, nil, groupInfo{pg: pg, pods: members}, nil)
	if !st.IsSuccess() || !strings.Contains(st.Message(), "waiting for 2 pods evicted for it to terminate") {
		t.Errorf("while the victims terminate: %v, want Success waiting for them", st)
	}
	if got := nominations(res); !maps.Equal(got, want) {
		t.Errorf("nominations while waiting %v, want %v kept", got, want)
	}

	// Once minCount members are bound, the room is no longer reserved.
	for _, m := range members {
		cur := m.DeepCopy()
		cur.Spec.NodeName = "node-a"
		if err := p.podIndex.Update(cur); err != nil {
			t.Fatal(err)
		}
		p.observeBound(cur)
	}
	if p.jobs.Nominated("default/hp") {
		t.Error("the group's nomination outlives its binding")
	}
}

// TestUpstreamVictimDisruptionMode: the cheapest room for an 8-GPU member
// is node-b, where one pod of a low-priority upstream group holds 4 GPUs.
// With disruptionMode All the group is one job and goes whole, its pod on
// node-a too; with Single (the default) only its pod on node-b goes. The
// lone holder on node-a stays either way.
func TestUpstreamVictimDisruptionMode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mode       *schedulingv1beta1.DisruptionMode
		gone, kept []string
	}{
		{"All", &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}, []string{"low-0", "low-1"}, []string{"solo"}},
		{"Single", &schedulingv1beta1.DisruptionMode{Single: &schedulingv1beta1.SingleDisruptionMode{}}, []string{"low-1"}, []string{"low-0", "solo"}},
		{"unset", nil, []string{"low-1"}, []string{"low-0", "solo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var c gpuCluster
			c.node("node-a", nil)
			c.node("node-b", nil)
			c.group("low", 2, func(s *schedulingv1beta1.PodGroupSpec) { s.DisruptionMode = tc.mode })
			c.holder("low-0", "node-a", "low", 0, 1, 2, 3)
			c.holder("solo", "node-a", "", 4, 5, 6, 7)
			c.holder("low-1", "node-b", "low", 0, 1, 2, 3)
			pg := c.group("hp", 1)
			members := []*corev1.Pod{c.member("hp-0", "hp", 8)}
			p, cs := c.start(t)

			res, st := p.PodGroupPostFilter(ctx, nil, groupInfo{pg: pg, pods: members}, nil)
			if !st.IsSuccess() {
				t.Fatalf("PodGroupPostFilter = %v, want Success", st)
			}
			if got := nominations(res); got["hp-0"] != "node-b" {
				t.Errorf("nominations %v, want hp-0 on node-b", got)
			}
			evicted(t, cs, tc.gone, tc.kept...)
		})
	}
}

// TestUpstreamGroupPreemptsInsideItsTopologyDomain: two nodes in two
// racks, each with 4 GPUs free and 4 held. Two 4-GPU members fit without
// evicting anything, one per rack; a group constrained to one rack needs
// a holder gone. The plan follows the group's topology constraint, as
// the pod-group cycle that places it does.
func TestUpstreamGroupPreemptsInsideItsTopologyDomain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    string
		evicts bool
	}{
		{"rack constraint", rackLabel, true},
		{"no constraint", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var c gpuCluster
			c.node("node-a", map[string]string{rackLabel: "rack-0"})
			c.node("node-b", map[string]string{rackLabel: "rack-1"})
			c.holder("holder-a", "node-a", "", 0, 1, 2, 3)
			c.holder("holder-b", "node-b", "", 0, 1, 2, 3)
			pg := c.group("hp", 2, func(s *schedulingv1beta1.PodGroupSpec) {
				if tc.key != "" {
					s.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: tc.key}}}
				}
			})
			members := []*corev1.Pod{c.member("hp-0", "hp", 4), c.member("hp-1", "hp", 4)}
			p, _ := c.start(t)

			res, st := p.PodGroupPostFilter(ctx, nil, groupInfo{pg: pg, pods: members}, nil)
			if !tc.evicts {
				if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "retrying without preemption") {
					t.Errorf("PodGroupPostFilter = %v, want UnschedulableAndUnresolvable: room exists without evicting", st)
				}
				return
			}
			if !st.IsSuccess() {
				t.Fatalf("PodGroupPostFilter = %v, want Success", st)
			}
			nodes := slices.Sorted(maps.Values(nominations(res)))
			if len(nodes) != 2 || nodes[0] != nodes[1] {
				t.Errorf("members nominated to %v, want both to one node (one rack)", nodes)
			}
		})
	}
}

// TestUpstreamGroupLeftToInTreePreemption: StrataGang answers
// Unschedulable, evicting nothing, for what the in-tree pod-group
// preemption after it handles: a group whose pods need no device, and a
// composite group. A group with preemptionPolicy Never evicts nothing,
// and StrataGang's UnschedulableAndUnresolvable keeps the in-tree
// preemption from acting on it either.
func TestUpstreamGroupLeftToInTreePreemption(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var c gpuCluster
	c.node("node-a", nil)
	c.holder("holder-0", "node-a", "", dct.Indexes(8)...)
	cpuGroup := c.group("cpu", 1)
	cpuMembers := []*corev1.Pod{c.member("cpu-0", "cpu", 0)}
	never := c.group("never", 1, func(s *schedulingv1beta1.PodGroupSpec) { s.PreemptionPolicy = ptr.To(schedulingv1beta1.PreemptNever) })
	neverMembers := []*corev1.Pod{c.member("never-0", "never", 4)}
	gpuGroup := c.group("gpu", 1)
	gpuMembers := []*corev1.Pod{c.member("gpu-0", "gpu", 4)}
	p, _ := c.start(t)

	for _, tc := range []struct {
		name string
		info fwk.PodGroupInfo
		code fwk.Code
		msg  string
	}{
		{"pods need no device", groupInfo{pg: cpuGroup, pods: cpuMembers}, fwk.Unschedulable, ""},
		{"composite group", compositeInfo{groupInfo{pg: gpuGroup, pods: gpuMembers}}, fwk.Unschedulable, ""},
		{"preemptionPolicy Never", groupInfo{pg: never, pods: neverMembers}, fwk.UnschedulableAndUnresolvable, "preemptionPolicy is Never, so nothing was evicted"},
	} {
		res, st := p.PodGroupPostFilter(ctx, nil, tc.info, nil)
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%s: %v, want %v %q", tc.name, st, tc.code, tc.msg)
		}
		if res != nil && len(res.NominatingInfos) > 0 {
			t.Errorf("%s: nominated %v", tc.name, res.NominatingInfos)
		}
	}
	if gangs := p.jobs.Gangs(); len(gangs) > 0 {
		t.Errorf("preemptions recorded for %v, want none", gangs)
	}
}

// A group is StrataGang's to preempt for as soon as one of its pods
// holds a ResourceClaim.
func TestPreemptsGroupWithAnyClaim(t *testing.T) {
	p, _ := newTestPlugin(t, nil)
	p.capacity = &capacityEstimator{dra: noDevices{}}
	pod := testutil.MakePod("cpu").Req("1", "1Gi").Obj()
	if p.preemptsGroup([]*corev1.Pod{pod}) {
		t.Error("a CPU-only group is claimed from the in-tree preemption")
	}
	withClaim := testutil.MakePod("gpu").Claim("gpus", "c").Obj()
	if !p.preemptsGroup([]*corev1.Pod{pod, withClaim}) {
		t.Error("a group with a member holding a ResourceClaim is left to the in-tree preemption")
	}
}
