package gang

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

// TestStatusWriterFollowsWhatItSent: the PodGroup from the lister may lag.
// A message the lister still shows must be written again when something
// else was sent since, and an unchanged message is written once.
func TestStatusWriterFollowsWhatItSent(t *testing.T) {
	w := &statusWriter{updates: make(chan statusUpdate, 16), sent: map[types.UID]metav1.Condition{}}
	stale := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default", UID: "uid-1"}}
	stale.Status.Conditions = []metav1.Condition{{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Message: "no room"}}
	g := &gangSpec{key: "default/job", podGroup: stale}

	w.unschedulable(g, "no room")           // the lister already shows it
	w.unschedulable(g, "no room; evicting") // a change
	w.unschedulable(g, "no room; evicting") // unchanged
	w.unschedulable(g, "no room")           // back: the lister's copy is stale
	w.scheduled(g)

	var got []string
	for len(w.updates) > 0 {
		got = append(got, (<-w.updates).cond.Message)
	}
	want := []string{"no room; evicting", "no room", "all members placed"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions written (-want +got):\n%s", diff)
	}
}
