package gang

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
)

// The bound counts a node's room with evictions only where an evicted
// unit ran, and its room without evictions elsewhere.
func TestRoomBound(t *testing.T) {
	b := &roomBound{
		want:      4,
		base:      map[string]int{"a": 0, "b": 0, "c": 1, "d": 0},
		all:       map[string]int{"a": 1, "b": 1, "c": 2, "d": 2},
		unitNodes: [][]string{{"a"}, {"b"}, {"d"}, {"a", "b"}},
	}
	for _, tc := range []struct {
		set  []int
		want bool
	}{
		{nil, false},               // 1
		{[]int{0, 1}, false},       // a, b, c: 1+1+1
		{[]int{2}, false},          // c, d: 1+2
		{[]int{0, 2}, true},        // a, c, d: 1+1+2
		{[]int{3, 2}, true},        // a, b, c, d: 1+1+1+2
		{[]int{0, 1, 2, 3}, true},  // every unit
		{[]int{3}, false},          // a, b, c
		{[]int{1, 1, 1, 1}, false}, // a unit counted once
	} {
		if got := b.enough(tc.set); got != tc.want {
			t.Errorf("enough(%v) = %v, want %v", tc.set, got, tc.want)
		}
	}
}

func TestNodeLocal(t *testing.T) {
	byName := func(values ...string) *corev1.NodeSelector {
		return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: values}}}}}
	}
	byLabel := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}}}}}
	for name, tc := range map[string]struct {
		sel  *corev1.NodeSelector
		want bool
	}{
		"one node":        {byName("gpu-0"), true},
		"two nodes":       {byName("gpu-0", "gpu-1"), false},
		"all nodes (nil)": {nil, false},
		"by label":        {byLabel, false},
	} {
		if got := nodeLocal(tc.sel); got != tc.want {
			t.Errorf("%s: nodeLocal = %v, want %v", name, got, tc.want)
		}
	}
}

// PostFilter's message follows PreFilter's in the pod's condition: what
// PreFilter said is not repeated.
func TestAfterPreFilter(t *testing.T) {
	why := "gang default/job: 4 pods do not fit in the cluster: 2 of 4 pods fit"
	for _, tc := range []struct{ msg, want string }{
		{why, ""},
		{why + "; evicting all 3 lower-priority jobs would not make room either, so nothing was evicted", "evicting all 3 lower-priority jobs would not make room either, so nothing was evicted"},
		{"gang default/job: waiting for 2 pods evicted for it to terminate", "gang default/job: waiting for 2 pods evicted for it to terminate"},
	} {
		st := afterPreFilter(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, tc.msg), why)
		if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != tc.want {
			t.Errorf("afterPreFilter(%q) = %v %q, want %q", tc.msg, st.Code(), st.Message(), tc.want)
		}
	}
}

// Room nominated to a gang is reserved against other gangs and pods of
// the same or lower priority (as kube-scheduler counts nominated pods of
// equal priority), not against higher priorities or the gang itself, and
// not after nominationTTL. Without equal priority, two gangs of one
// priority that preempt at once evict for the same room, and the one
// that loses the race backs off for the TTL.
func TestNominatedRoomReservedAgainstEqualPriority(t *testing.T) {
	p := &Plugin{nominations: map[string]*nomination{}}
	p.rebuild.Do(func() {}) // nothing to restore
	nom := newNomination(1000)
	nom.nodes["cpu-0"] = 2
	p.nominations["default/hp"] = nom
	stale := newNomination(1000)
	stale.nodes["cpu-1"] = 1
	stale.at = time.Now().Add(-nominationTTL - time.Second)
	p.nominations["default/old"] = stale
	for _, tc := range []struct {
		prio int32
		gang string
		want string
	}{
		{999, "", "default/hp"},
		{1000, "", "default/hp"},
		{1000, "default/other", "default/hp"},
		{1001, "default/other", ""},
		{1000, "default/hp", ""},
	} {
		if got := p.reservedFor("cpu-0", tc.prio, tc.gang); got != tc.want {
			t.Errorf("reservedFor(cpu-0, priority %d, gang %q) = %q, want %q", tc.prio, tc.gang, got, tc.want)
		}
		if got := p.reservedFor("cpu-1", tc.prio, tc.gang); got != "" {
			t.Errorf("reservedFor(cpu-1, priority %d) = %q after the TTL, want none", tc.prio, got)
		}
		got := p.reservedNodes(tc.prio, tc.gang)
		if want := tc.want != ""; got.Has("cpu-0") != want || got.Has("cpu-1") {
			t.Errorf("reservedNodes(priority %d, gang %q) = %v, want cpu-0: %v", tc.prio, tc.gang, sets.List(got), want)
		}
	}
}
