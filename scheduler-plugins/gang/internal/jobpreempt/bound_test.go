package jobpreempt

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The bound counts a node's room with evictions only where an evicted
// unit ran, and its room without evictions elsewhere.
func TestRoomBound(t *testing.T) {
	b := &RoomBound{
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
		if got := b.Enough(tc.set); got != tc.want {
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
		if got := NodeLocal(tc.sel); got != tc.want {
			t.Errorf("%s: NodeLocal = %v, want %v", name, got, tc.want)
		}
	}
}
