package gang

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

const rackLabel = "topology.kubernetes.io/rack"

// testGroup is an upstream PodGroup of unscheduled pods with a rack
// topology constraint.
type testGroup struct {
	fwk.PodGroupInfo
	pods []*corev1.Pod
}

func (g testGroup) GetUnscheduledPods() []*corev1.Pod                           { return g.pods }
func (g testGroup) GetKey() string                                              { return "default/job" }
func (g testGroup) GetNamespace() string                                        { return "default" }
func (g testGroup) GetName() string                                             { return "job" }
func (g testGroup) GetChildren() []fwk.PodGroupInfo                             { return nil }
func (g testGroup) GetCompositePodGroup() *schedulingv1alpha3.CompositePodGroup { return nil }
func (g testGroup) GetPodGroup() *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{
			Topology: []schedulingv1beta1.TopologyConstraint{{Key: rackLabel}},
		}},
	}
}

// noDevices is a DRA manager of a cluster without DeviceClasses.
type noDevices struct{ fwk.SharedDRAManager }

func (noDevices) DeviceClassResolver() fwk.DeviceClassResolver { return nil }

// racks makes rack-i of i+1 nodes of 4 CPUs each: the higher the
// index, the more room.
func racks(n int) []fwk.NodeInfo {
	var out []fwk.NodeInfo
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			ni := framework.NewNodeInfo()
			ni.SetNode(&corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d-%d", i, j), Labels: map[string]string{rackLabel: fmt.Sprintf("rack-%d", i)}},
				Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")}},
			})
			out = append(out, ni)
		}
	}
	return out
}

func members(n int, cpu string) []*corev1.Pod {
	var out []*corev1.Pod
	for i := 0; i < n; i++ {
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("job-%d", i), UID: types.UID(fmt.Sprint("job-", i))},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
			}}}},
		})
	}
	return out
}

func proposed(t *testing.T, p *Plugin, pods []*corev1.Pod, nodes []fwk.NodeInfo) []string {
	t.Helper()
	res, st := p.GeneratePlacements(context.Background(), framework.NewCycleState(), testGroup{pods: pods}, &fwk.Placement{Nodes: nodes})
	if !st.IsSuccess() {
		t.Fatalf("GeneratePlacements: %v", st)
	}
	var names []string
	for _, pl := range res.Placements {
		names = append(names, pl.Name)
	}
	return names
}

// A group whose fit StrataGang counts exactly is offered the tightest
// domains where it fits, no more than maxProposals; every fitting domain
// when the count is only an estimate (anti-affinity) or when an attempt
// of the group already failed; every domain when it fits nowhere.
func TestGeneratePlacementsProposesTheTightestFits(t *testing.T) {
	p, _ := newTestPlugin(t, nil)
	p.capacity = &capacityEstimator{dra: noDevices{}}
	// Two members of 4 CPUs, one per node: every rack but rack-0 holds
	// them, rack-1 leaves no room, rack-7 room for 6 more.
	nodes := racks(8)
	tightest := []string{"rack-1", "rack-2", "rack-3", "rack-4"}
	everyFit := []string{"rack-1", "rack-2", "rack-3", "rack-4", "rack-5", "rack-6", "rack-7"}

	if got := proposed(t, p, members(2, "4"), nodes); !slices.Equal(got, tightest) {
		t.Errorf("proposed %v, want the %d tightest fits %v", got, maxProposals, tightest)
	}
	for _, pl := range tightest {
		if _, ok := p.spares.get("default/job", pl); !ok {
			t.Errorf("no spare room recorded for proposed %s: ScorePlacement cannot rank it", pl)
		}
	}

	failed := members(2, "4")
	failed[1].Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	if got := proposed(t, p, failed, nodes); !slices.Equal(got, everyFit) {
		t.Errorf("after a failed attempt proposed %v, want every fit %v", got, everyFit)
	}

	spread := members(2, "4")
	spread[0].Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		}},
	}}
	if got := proposed(t, p, spread, nodes); !slices.Equal(got, everyFit) {
		t.Errorf("with anti-affinity proposed %v, want every fit %v", got, everyFit)
	}

	if got := proposed(t, p, members(2, "5"), nodes); len(got) != 8 {
		t.Errorf("a group that fits nowhere was offered %v, want all 8 racks", got)
	}
}

// The spare room of proposals is kept two generations of groups: long
// enough for the cycle that proposed them, forgotten after.
func TestPlacementSparesForgetOldGroups(t *testing.T) {
	var s placementSpares
	s.set("default/first", "rack-0", 3)
	for i := 0; i < sparesPerGeneration; i++ {
		s.set(fmt.Sprintf("default/g-%d", i), "rack-0", i)
	}
	if v, ok := s.get("default/first", "rack-0"); !ok || v != 3 {
		t.Fatalf("the previous generation's spare = %d, %v; want 3", v, ok)
	}
	for i := 0; i < sparesPerGeneration; i++ {
		s.set(fmt.Sprintf("default/h-%d", i), "rack-0", i)
	}
	if _, ok := s.get("default/first", "rack-0"); ok {
		t.Error("a group two generations old is still remembered")
	}
	if v, ok := s.get(fmt.Sprintf("default/h-%d", sparesPerGeneration-1), "rack-0"); !ok || v != sparesPerGeneration-1 {
		t.Errorf("the newest group's spare = %d, %v", v, ok)
	}
}
