package gang

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/gang/internal/jobpreempt"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// noClaims is a DRA manager of a cluster without DeviceClasses or
// allocated claims.
type noClaims struct{ noDevices }

func (noClaims) ResourceClaims() fwk.ResourceClaimTracker { return emptyClaimTracker{} }

type emptyClaimTracker struct{ fwk.ResourceClaimTracker }

func (emptyClaimTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	return allocated(), nil
}

// groupCluster is a group of two gangs, ps (2 members of 8 CPUs) and
// workers (3 members of workerCPU), on four nodes of 224 CPUs, node-1 of
// them full. bound names the members bound to node-0 already.
type groupCluster struct {
	p       *Plugin
	h       *fakeHandle
	ps      []*corev1.Pod
	workers []*corev1.Pod
	nodes   []fwk.NodeInfo
	byName  map[string]*framework.NodeInfo
}

func newGroupCluster(t *testing.T, workerCPU string, bound ...string) *groupCluster {
	t.Helper()
	const groups = `["ps", "workers"]`
	withCPU := func(pod *corev1.Pod, cpu string) *corev1.Pod {
		pod.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
		}}}
		return pod
	}
	c := &groupCluster{byName: map[string]*framework.NodeInfo{}}
	for i := 0; i < 2; i++ {
		c.ps = append(c.ps, withCPU(member("default", "ps", i, 2, groups), "8"))
	}
	for i := 0; i < 3; i++ {
		c.workers = append(c.workers, withCPU(member("default", "workers", i, 3, groups), workerCPU))
	}
	on := map[string][]*corev1.Pod{"node-1": {withCPU(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "filler", UID: "filler"}}, "224")}}
	for _, m := range append(append([]*corev1.Pod(nil), c.ps...), c.workers...) {
		for _, name := range bound {
			if m.Name == name {
				m.Spec.NodeName = "node-0"
				on["node-0"] = append(on["node-0"], m)
			}
		}
	}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("node-%d", i)
		ni := framework.NewNodeInfo(on[name]...)
		ni.SetNode(&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("224"), corev1.ResourcePods: resource.MustParse("110"),
			}},
		})
		c.nodes = append(c.nodes, ni)
		c.byName[name] = ni
	}
	c.p, c.h = newTestPlugin(t, append(append([]*corev1.Pod(nil), c.ps...), c.workers...))
	c.p.src.topologies = noTopology{}
	c.p.capacity = &capacityEstimator{dra: noClaims{}}
	return c
}

// node returns the NodeInfo of a node by name.
func (c *groupCluster) node(name string) *framework.NodeInfo { return c.byName[name] }

// hold runs a member's scheduling cycle up to Permit: PreFilter, Filter
// on node, Reserve there, and Permit; it returns the Permit status.
func (c *groupCluster) hold(t *testing.T, pod *corev1.Pod, node string) *fwk.Status {
	t.Helper()
	state := framework.NewCycleState()
	res, st := c.p.PreFilter(context.Background(), state, pod, c.nodes)
	if !st.IsSuccess() {
		t.Fatalf("PreFilter of %s: %v", pod.Name, st)
	}
	if !res.NodeNames.Has(node) {
		t.Fatalf("plan of %s leaves out %s: %v", pod.Name, node, sets.List(res.NodeNames))
	}
	if st := c.p.Filter(context.Background(), state, pod, c.node(node)); !st.IsSuccess() {
		t.Fatalf("Filter of %s on %s: %v", pod.Name, node, st)
	}
	if st := c.p.Reserve(context.Background(), state, pod, node); !st.IsSuccess() {
		t.Fatalf("Reserve of %s: %v", pod.Name, st)
	}
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = node
	c.node(node).AddPod(assumed)
	st, _ = c.p.Permit(context.Background(), state, pod, node)
	if st.Code() == fwk.Wait {
		c.h.waiting[pod.UID] = &fakeWaitingPod{pod: assumed}
	}
	return st
}

// TestHalfBoundGroupPlacesTheRest: ps-0 is bound and ps-1 holds room
// nominated to gang ps on the same node (its preemption's, with ps-1's
// nominated node written there). The workers, three members that take a
// node each, must still be planned on the three nodes with room, ps-0's
// node among them: room nominated to a gang of their own group does not
// keep them off it (its members' room is counted instead), while other
// pods stay off it as before.
func TestHalfBoundGroupPlacesTheRest(t *testing.T) {
	c := newGroupCluster(t, "200", "ps-0")
	c.ps[1].Status.NominatedNodeName = "node-0"
	if err := c.p.podIndex.Update(c.ps[1]); err != nil {
		t.Fatal(err)
	}
	c.p.jobs.Set("default/ps", jobpreempt.NewNomination(0, map[string]int{"node-0": 1}))
	g := c.p.gangOf(c.workers[0])
	pl, st := c.p.computePlan(context.Background(), c.workers[0], g, c.nodes)
	if !st.IsSuccess() {
		t.Fatalf("workers not planned with ps-0 bound and ps-1 nominated beside it: %v", st)
	}
	got := map[string]int{}
	for n, k := range pl.remaining[shapeKey(c.workers[0])] {
		if k > 0 {
			got[n] = k
		}
	}
	if want := map[string]int{"node-0": 1, "node-2": 1, "node-3": 1}; !maps.Equal(got, want) {
		t.Errorf("workers planned on %v, want %v", got, want)
	}

	// Whole cycles: every worker passes Filter where its plan puts it,
	// ps-1 joins ps-0 and the group is let go.
	for i, node := range []string{"node-0", "node-2", "node-3"} {
		if st := c.hold(t, c.workers[i], node); st.Code() != fwk.Wait {
			t.Fatalf("Permit of %s: %v, want Wait for ps-1", c.workers[i].Name, st)
		}
	}
	if st := c.hold(t, c.ps[1], "node-0"); !st.IsSuccess() {
		t.Fatalf("Permit of ps-1, the member completing the group: %v", st)
	}
	for _, m := range c.workers {
		if !c.h.waiting[m.UID].allowed {
			t.Errorf("%s not let go with its group", m.Name)
		}
	}

	// A pod outside the group still stays off the room nominated to ps.
	c.p.jobs.Set("default/ps", jobpreempt.NewNomination(0, map[string]int{"node-2": 1}))
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other", UID: "other"}}
	state := framework.NewCycleState()
	if _, st := c.p.PreFilter(context.Background(), state, other, c.nodes); !st.IsSuccess() && st.Code() != fwk.Skip {
		t.Fatalf("PreFilter of a pod outside the group: %v", st)
	}
	if st := c.p.Filter(context.Background(), state, other, c.node("node-2")); st.IsSuccess() || !strings.Contains(st.Message(), "reserved for gang default/ps") {
		t.Errorf("Filter of a pod outside the group on ps's room: %v, want kept off", st)
	}
}

// TestGroupPlanCountsTheRoomItsOtherGangExpects: ps has a live plan with
// room for ps-1 on a node (ps-0 reserved there, held in Permit), and a
// worker is planned before ps-1 comes. The node is not closed to the
// workers, but ps-1's room on it counts: workers that fit beside it go
// there, workers that do not fit beside it do not.
func TestGroupPlanCountsTheRoomItsOtherGangExpects(t *testing.T) {
	for _, tc := range []struct {
		workerCPU string
		fit       bool
	}{
		{"200", true},  // 8 + 8 + 200 of 224 CPUs
		{"210", false}, // 8 + 8 + 210: only if ps-1's room were not counted
	} {
		t.Run(tc.workerCPU, func(t *testing.T) {
			c := newGroupCluster(t, tc.workerCPU)
			state := framework.NewCycleState()
			res, st := c.p.PreFilter(context.Background(), state, c.ps[0], c.nodes)
			if !st.IsSuccess() || res.NodeNames.Len() != 1 {
				t.Fatalf("PreFilter of ps-0: %v, nodes %v, want both members planned on one node", st, res)
			}
			node := sets.List(res.NodeNames)[0]
			if st := c.hold(t, c.ps[0], node); st.Code() != fwk.Wait {
				t.Fatalf("Permit of ps-0: %v, want Wait", st)
			}
			g := c.p.gangOf(c.workers[0])
			_, st = c.p.computePlan(context.Background(), c.workers[0], g, c.nodes)
			if st.IsSuccess() != tc.fit {
				t.Errorf("workers of %s CPUs beside ps-0 and the room planned for ps-1 on %s: plan %v, want fit %v", tc.workerCPU, node, st, tc.fit)
			}
			if !tc.fit && !strings.Contains(st.Message(), "2 of 3 pods fit") {
				t.Errorf("workers that do not fit: %q, want 2 of 3 pods fit", st.Message())
			}
		})
	}
}

// TestReservedOutsideTheGroup: room nominated to a gang of the group is
// left to the group; room nominated to a gang outside it is not.
func TestReservedOutsideTheGroup(t *testing.T) {
	group := []string{"default/ps", "default/workers"}
	for name, tc := range map[string]struct {
		noms map[string]map[string]int
		want []string
	}{
		"other gang of the group":           {map[string]map[string]int{"default/ps": {"node-0": 1}}, nil},
		"both gangs of the group, one node": {map[string]map[string]int{"default/ps": {"node-0": 1}, "default/workers": {"node-0": 1}}, nil},
		"a gang outside the group":          {map[string]map[string]int{"default/ps": {"node-0": 1}, "default/other": {"node-2": 1}}, []string{"node-2"}},
		"outside gang on the group's node":  {map[string]map[string]int{"default/ps": {"node-0": 1}, "default/other": {"node-0": 1}}, []string{"node-0"}},
		"own nomination":                    {map[string]map[string]int{"default/workers": {"node-0": 1}}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			p, _ := newTestPlugin(t, nil)
			for gang, nodes := range tc.noms {
				p.jobs.Set(gang, jobpreempt.NewNomination(0, nodes))
			}
			if got := sets.List(p.reservedOutside(0, "default/workers", group)); !slices.Equal(got, tc.want) {
				t.Errorf("reservedOutside = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMemberWithAllocatedClaimIsItsOwnShape: three workers of one
// template need 8 GPUs each on nodes of 8. train-0's claim is allocated
// on gpu-0 already (the scheduler that wrote it stopped before binding
// the pod), so train-0 can only go there and needs no more devices,
// while train-1 and train-2 need 8 free GPUs elsewhere. Whichever worker
// the plan is computed for, it puts train-0 on gpu-0 and the other two
// on gpu-1 and gpu-2. As one shape, the plan for train-0 sent all three
// to gpu-0 (train-0 needs no devices), and the plan for train-1 found
// two nodes for three members.
func TestMemberWithAllocatedClaimIsItsOwnShape(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var c gpuCluster
	for i := 0; i < 3; i++ {
		c.node(fmt.Sprintf("gpu-%d", i), nil)
	}
	var workers []*corev1.Pod
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("train-%d", i)
		pod := testutil.MakePod(name).Req("1", "1Gi").ClaimTemplate("gpus", "train-gpus").Obj()
		pod.UID = types.UID(name)
		pod.Annotations = map[string]string{AnnotationPrefix + KeyName: "train", AnnotationPrefix + KeyMinAvailable: "3"}
		pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To(name + "-gpus")}}
		claim := testutil.MakeClaimSpec().Request("gpus", upstreamGPUClass, 8).Claim("default", name+"-gpus")
		if i == 0 {
			claim = dct.Allocate(claim, "gpu-0", 0, 1, 2, 3, 4, 5, 6, 7)
			claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
		}
		c.claims = append(c.claims, claim)
		c.pods = append(c.pods, pod)
		workers = append(workers, pod)
	}
	p, _ := c.start(t)
	p.src.topologies = noTopology{}
	nodes, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	if p.shapeOf(workers[0]) == p.shapeOf(workers[1]) {
		t.Errorf("train-0, whose claim is allocated, has the shape of train-1, whose claim is not")
	}
	if p.shapeOf(workers[1]) != p.shapeOf(workers[2]) {
		t.Errorf("train-1 and train-2 differ in shape; only their claims' names differ")
	}
	for _, pod := range workers {
		pl, st := p.computePlan(ctx, pod, p.gangOf(pod), nodes)
		if !st.IsSuccess() {
			t.Errorf("plan for %s: %v", pod.Name, st)
			continue
		}
		got := map[string]map[string]int{}
		for _, w := range workers {
			for n, k := range pl.remaining[p.shapeOf(w)] {
				if k > 0 {
					if got[w.Name] == nil {
						got[w.Name] = map[string]int{}
					}
					got[w.Name][n] = k
				}
			}
		}
		want := map[string]map[string]int{
			"train-0": {"gpu-0": 1},
			"train-1": {"gpu-1": 1, "gpu-2": 1},
			"train-2": {"gpu-1": 1, "gpu-2": 1},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("plan for %s: room by member %v, want %v", pod.Name, got, want)
		}
	}
}
