package topology

import (
	"slices"

	"github.com/strata-sh/strata/internal/topotree"
)

// Room is how many more members each node of a tree can take, with the
// sum of every domain and the spread of node room inside each domain of
// the lowest layer kept up to date as nodes change. A placement reads a
// domain's room from these aggregates instead of walking its nodes: it
// walks only the domains that can hold the gang, and the nodes of the
// domain it fills. A Room is not safe for concurrent use.
type Room struct {
	t *topotree.Tree
	// caps is each node's room. Nodes outside the tree are left out
	// (every node counts when the tree has no layers). A Room made by
	// Place borrows the caller's map instead: then caps is read only,
	// may hold nodes outside the tree and negative values, and
	// everything reading it clamps and filters.
	caps     map[string]int
	borrowed bool
	sum      []int      // per Domain.Index: the room of the nodes below it
	hist     [][]bucket // per Domain.Index, lowest layer only: node room values
	all      []bucket   // node room values over every node
	total    int
}

// bucket counts the nodes with room v (v > 0). Histograms are sorted by
// v, largest first; node room values are few and small, so a histogram
// is short.
type bucket struct{ v, n int }

// NewRoom returns the room of the tree's nodes; capacity is copied.
func NewRoom(t *topotree.Tree, capacity map[string]int) *Room {
	r := newRoom(t)
	r.caps = make(map[string]int, len(capacity))
	for n, c := range capacity {
		r.Set(n, c)
	}
	return r
}

// borrowRoom is the room of capacity without a copy, for one decision.
func borrowRoom(t *topotree.Tree, capacity map[string]int) *Room {
	r := newRoom(t)
	r.caps, r.borrowed = capacity, true
	for n, c := range capacity {
		r.add(n, 0, max(c, 0))
	}
	return r
}

func newRoom(t *topotree.Tree) *Room {
	r := &Room{t: t, sum: make([]int, len(t.All)), hist: make([][]bucket, len(t.All))}
	// Room for four values per domain in one allocation; a histogram
	// with more moves out on its own.
	const per = 4
	backing := make([]bucket, len(t.All)*per)
	for i := range r.hist {
		r.hist[i] = backing[i*per : i*per : (i+1)*per]
	}
	return r
}

// Set makes a node's room c (a negative c counts as 0). A node outside
// the tree is ignored unless the tree has no layers. It costs the depth
// of the tree.
func (r *Room) Set(node string, c int) {
	if r.borrowed {
		panic("topology: Set on the room of a single decision")
	}
	if !r.inTree(node) {
		return
	}
	c = max(c, 0)
	old, ok := r.caps[node]
	r.caps[node] = c
	if !ok || old != c {
		r.add(node, old, c)
	}
}

// Get returns a node's room and whether the room has one for it.
func (r *Room) Get(node string) (int, bool) {
	c, ok := r.caps[node]
	if !ok || !r.inTree(node) {
		return 0, false
	}
	return max(c, 0), true
}

func (r *Room) inTree(node string) bool {
	return len(r.t.Layers) == 0 || r.t.Leaf[node] != nil
}

// add moves a node's room from old to c in every aggregate.
func (r *Room) add(node string, old, c int) {
	leaf := r.t.Leaf[node]
	if len(r.t.Layers) > 0 && leaf == nil {
		return
	}
	r.total += c - old
	r.all = bump(bump(r.all, old, -1), c, 1)
	if leaf == nil {
		return
	}
	r.hist[leaf.Index] = bump(bump(r.hist[leaf.Index], old, -1), c, 1)
	for d := leaf; d != nil; d = d.Parent {
		r.sum[d.Index] += c - old
	}
}

// bump adds delta nodes of room v to a histogram.
func bump(h []bucket, v, delta int) []bucket {
	if v <= 0 {
		return h
	}
	i, found := slices.BinarySearchFunc(h, v, func(b bucket, v int) int { return v - b.v })
	switch {
	case !found:
		return slices.Insert(h, i, bucket{v: v, n: delta})
	case h[i].n+delta == 0:
		return slices.Delete(h, i, i+1)
	default:
		h[i].n += delta
		return h
	}
}

// room returns a node's room, floored to m; 0 for a node it lacks.
func (r *Room) room(node string, m int) int {
	return floorTo(r.caps[node], m)
}

// histRoom adds up a histogram with each node's room floored to m.
func histRoom(h []bucket, m int) int {
	s := 0
	for _, b := range h {
		s += floorTo(b.v, m) * b.n
	}
	return s
}
