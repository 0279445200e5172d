package gang

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/topotree"
)

func podGroup(ann map[string]string) *schedulingv1alpha1.PodGroup {
	return &schedulingv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", Annotations: ann},
		Spec:       schedulingv1alpha1.PodGroupSpec{MinMember: 8, ScheduleTimeoutSeconds: ptr.To[int32](300)},
	}
}

func TestSpecFromPodGroupReadsKoordinatorAliases(t *testing.T) {
	g := specFromPodGroup(podGroup(map[string]string{
		"gang.scheduling.koordinator.sh/network-topology-spec": `{"gatherStrategy":[{"layer":"BlockLayer","strategy":"PreferGather","podCountMultiple":4}]}`,
		"gang.scheduling.koordinator.sh/groups":                `["ml/ps", "workers"]`,
		"gang.scheduling.koordinator.sh/match-policy":          "once-satisfied",
	}))
	if g.err != nil {
		t.Fatal(g.err)
	}
	want := []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.PreferGather, PodCountMultiple: 4}}
	if diff := cmp.Diff(want, g.rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ml/ps", "ml/train", "ml/workers"}, g.group); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}
	if g.minMember != 8 || g.timeout != 300*time.Second || g.matchPolicy != MatchOnceSatisfied {
		t.Errorf("spec = %+v", g)
	}
}

func TestStrataKeysWinOverAliases(t *testing.T) {
	g := specFromPodGroup(podGroup(map[string]string{
		"gang.scheduling.koordinator.sh/network-topology-spec": `{"gatherStrategy":[{"layer":"SpineLayer","strategy":"MustGather"}]}`,
		"scheduling.strata.sh/network-topology-spec":           `{"gatherStrategy":[{"layer":"BlockLayer","strategy":"MustGather"}]}`,
	}))
	if len(g.rules) != 1 || g.rules[0].Layer != "BlockLayer" {
		t.Errorf("rules = %+v, want the scheduling.strata.sh one", g.rules)
	}
}

func TestBadAnnotationsNameTheField(t *testing.T) {
	tests := map[string]struct {
		ann  map[string]string
		want string
	}{
		"unknown field": {map[string]string{"scheduling.strata.sh/network-topology-spec": `{"gatherStrategy":[{"layer":"BlockLayer","stratgy":"MustGather"}]}`},
			`annotation scheduling.strata.sh/network-topology-spec: unknown field "gatherStrategy[0].stratgy"`},
		"bad strategy": {map[string]string{"gang.scheduling.koordinator.sh/network-topology-spec": `{"gatherStrategy":[{"layer":"BlockLayer","strategy":"Gather"}]}`},
			`annotation gang.scheduling.koordinator.sh/network-topology-spec: gatherStrategy[0].strategy: "Gather" is neither MustGather nor PreferGather`},
		"missing layer": {map[string]string{"scheduling.strata.sh/network-topology-spec": `{"gatherStrategy":[{"strategy":"MustGather"}]}`},
			`gatherStrategy[0].layer: required`},
		"bad match policy": {map[string]string{"scheduling.strata.sh/match-policy": "all"},
			`annotation scheduling.strata.sh/match-policy: "all" is not one of`},
		"bad groups": {map[string]string{"scheduling.strata.sh/groups": `ml/ps`},
			`annotation scheduling.strata.sh/groups: want a JSON array`},
		"bad waiting time": {map[string]string{"gang.scheduling.koordinator.sh/waiting-time": `soon`},
			`annotation gang.scheduling.koordinator.sh/waiting-time: "soon" is not a positive duration`},
	}
	for name, tc := range tests {
		g := specFromPodGroup(podGroup(tc.ann))
		if g.err == nil || !strings.Contains(g.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, g.err, tc.want)
		}
	}
}

func TestGangKeyOf(t *testing.T) {
	labelled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Labels: map[string]string{schedulingv1alpha1.PodGroupLabel: "train"}}}
	koord := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Annotations: map[string]string{"gang.scheduling.koordinator.sh/name": "lite"}}}
	upstream := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml"}, Spec: corev1.PodSpec{SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To("wl")}}}
	for pod, want := range map[*corev1.Pod]string{labelled: "ml/train", koord: "ml/lite", upstream: "ml/wl", {}: ""} {
		if got := gangKeyOf(pod); got != want {
			t.Errorf("gangKeyOf = %q, want %q", got, want)
		}
	}
	lite := specFromPod(koord, "ml/lite")
	if lite.err != nil || lite.minMember != 1 {
		t.Errorf("pod-only gang = %+v", lite)
	}
	koord.Annotations["gang.scheduling.koordinator.sh/min-available"] = "x"
	if g := specFromPod(koord, "ml/lite"); g.err == nil || !strings.Contains(g.err.Error(), "min-available") {
		t.Errorf("bad min-available: %v", g.err)
	}
}

func TestSpecFromUpstream(t *testing.T) {
	g := specFromUpstream(&schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "wl"},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 4}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: "topology.kubernetes.io/rack"}}},
		},
	}, nil)
	if g.minMember != 4 || !g.upstream || g.victimKey != "" {
		t.Errorf("upstream spec = %+v, want minMember 4, pods evicted one by one", g)
	}
}

// TestSpecFromUpstreamComposite: the highest composite with disruptionMode
// All is what preemption evicts whole.
func TestSpecFromUpstreamComposite(t *testing.T) {
	constraint := func(key string) *schedulingv1alpha3.CompositePodGroupSchedulingConstraints {
		return &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1alpha3.TopologyConstraint{{Key: key}}}
	}
	job := &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "job"},
		Spec: schedulingv1alpha3.CompositePodGroupSpec{SchedulingConstraints: constraint("spine"), DisruptionMode: &schedulingv1alpha3.CompositeDisruptionMode{All: &schedulingv1alpha3.AllCompositeDisruptionMode{}}}}
	stage := &schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "stage"},
		Spec: schedulingv1alpha3.CompositePodGroupSpec{ParentCompositePodGroupName: ptr.To("job"), SchedulingConstraints: constraint("block")}}
	g := specFromUpstream(&schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "workers"},
		Spec: schedulingv1beta1.PodGroupSpec{
			ParentCompositePodGroupName: ptr.To("stage"),
			SchedulingPolicy:            schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
			SchedulingConstraints:       &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: "rack"}}},
		},
	}, []*schedulingv1alpha3.CompositePodGroup{stage, job})
	if g.victimKey != "ml/job" {
		t.Errorf("victim key %q, want the job composite (disruptionMode All)", g.victimKey)
	}
}

// TestKoordinatorModeAndTotalNumber: mode and total-number are honoured
// or refused with the annotation named, never ignored.
func TestKoordinatorModeAndTotalNumber(t *testing.T) {
	g := specFromPodGroup(podGroup(map[string]string{"gang.scheduling.koordinator.sh/mode": "NonStrict", "gang.scheduling.koordinator.sh/total-number": "10"}))
	if g.err != nil || !g.nonStrict {
		t.Errorf("NonStrict gang: err %v, nonStrict %v", g.err, g.nonStrict)
	}
	for ann, want := range map[string]string{
		"gang.scheduling.koordinator.sh/mode":                   `annotation gang.scheduling.koordinator.sh/mode: "Lenient" is neither Strict nor NonStrict`,
		"gang.scheduling.koordinator.sh/total-number":           "annotation gang.scheduling.koordinator.sh/total-number: 4 is less than the gang's minimum of 8 members",
		"gang.scheduling.koordinator.sh/network-topology-index": "annotation gang.scheduling.koordinator.sh/network-topology-index: placing members in rank order is not supported",
	} {
		value := map[string]string{"gang.scheduling.koordinator.sh/mode": "Lenient", "gang.scheduling.koordinator.sh/total-number": "4"}[ann]
		g := specFromPodGroup(podGroup(map[string]string{ann: value}))
		if g.err == nil || !strings.Contains(g.err.Error(), want) {
			t.Errorf("%s: error %v, want %q", ann, g.err, want)
		}
	}
}
