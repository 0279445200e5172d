package jobpreempt

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// RoomBound is an upper bound on how many members of the gang's scarcest
// shape fit once a set of units is evicted, from two capacity estimates:
// with no eviction, and with every candidate evicted. A node that no
// evicted unit ran on keeps its capacity without evictions, because
// what a victim frees (requests, pod slots, devices of node-local slices)
// is on its own node. The victim search asks it before each simulation:
// a set that cannot free enough room is turned down without planning
// over every node (on a full cluster, most of the search's questions).
type RoomBound struct {
	want      int
	base, all map[string]int
	unitNodes [][]string
}

// NewRoomBound returns the bound for want members, from the members per
// node without evictions (base) and with every unit evicted (all); nodes
// in blocked count for none. The maps are taken over.
func NewRoomBound(want int, units []Unit, base, all map[string]int, blocked sets.Set[string]) *RoomBound {
	b := &RoomBound{want: want, base: base, all: all, unitNodes: make([][]string, len(units))}
	for i, u := range units {
		for _, v := range u.Victims {
			b.unitNodes[i] = append(b.unitNodes[i], v.Spec.NodeName)
		}
	}
	for n := range blocked {
		b.base[n], b.all[n] = 0, 0
	}
	return b
}

// Enough reports whether evicting set could make room for the scarcest
// shape; false means it cannot.
func (b *RoomBound) Enough(set []int) bool {
	touched := sets.New[string]()
	for _, i := range set {
		touched.Insert(b.unitNodes[i]...)
	}
	total := 0
	for n, c := range b.base {
		if !touched.Has(n) {
			total += c
		}
	}
	for n := range touched {
		total += b.all[n]
	}
	return total >= b.want
}

// Bounded reports whether a bound holds for units: it does not where a
// victim has devices that are not node-local, since freeing them helps
// other nodes.
func (j *Preemptor) Bounded(units []Unit) bool {
	for _, u := range units {
		for _, v := range u.Victims {
			for _, c := range j.claimsOf(v) {
				if c.Status.Allocation != nil && !NodeLocal(c.Status.Allocation.NodeSelector) {
					return false
				}
			}
		}
	}
	return true
}

// NodeLocal reports whether an allocation's node selector names one node
// (devices of a node's own slices), as the allocator writes it.
func NodeLocal(sel *corev1.NodeSelector) bool {
	if sel == nil || len(sel.NodeSelectorTerms) != 1 {
		return false
	}
	t := sel.NodeSelectorTerms[0]
	return len(t.MatchExpressions) == 0 && len(t.MatchFields) == 1 && t.MatchFields[0].Key == "metadata.name" &&
		t.MatchFields[0].Operator == corev1.NodeSelectorOpIn && len(t.MatchFields[0].Values) == 1
}
