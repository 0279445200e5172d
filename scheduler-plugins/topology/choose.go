package topology

import (
	"fmt"
	"slices"
	"sort"

	"github.com/strata-sh/strata/internal/topotree"
)

// tightest returns the first candidate in this order: those holding
// placed members first, then the fewest lowest-layer switches the gang
// would span inside them (a domain whose room sits in a few big blocks
// beats one with the same room in many small ones), then the least spare
// capacity, then the parent with the least capacity (keeping emptier
// parents whole), then name. Candidates are of one layer, so names
// break every tie.
func (p *placer) tightest(c []scope, need int) scope {
	best := ranked{scope: c[0], span: -1}
	for _, s := range c[1:] {
		if r := (ranked{scope: s, span: -1}); p.tighter(&r, &best, need) {
			best = r
		}
	}
	return best.scope
}

// ranked is a candidate with its span, worked out when first needed.
type ranked struct {
	scope
	span int
}

func (p *placer) tighter(a, b *ranked, need int) bool {
	if a.d == nil || b.d == nil {
		return a.d == nil
	}
	if pa, pb := p.placed[a.d], p.placed[b.d]; pa != pb {
		return pa > pb
	}
	for _, r := range []*ranked{a, b} {
		if r.span < 0 {
			r.span = p.span(r.d, need)
		}
	}
	if a.span != b.span {
		return a.span < b.span
	}
	if a.cap != b.cap {
		return a.cap < b.cap
	}
	if ca, cb := p.parentCap(a.d), p.parentCap(b.d); ca != cb {
		return ca < cb
	}
	return a.d.Name < b.d.Name
}

// span counts the domains of the lowest layer (the switches right above
// the nodes) that need members take inside d at the fewest: the roomiest
// first, which is the minimum. For a domain of the lowest layer itself it
// counts nodes, from the domain's histogram of node room. One more than
// there are means they cannot hold need.
func (p *placer) span(d *topotree.Domain, need int) int {
	var s int
	if len(d.Children) == 0 {
		m := p.mult[len(p.t.Layers)]
		for _, b := range p.r.hist[d.Index] {
			v := floorTo(b.v, m)
			if need <= 0 || v == 0 {
				break
			}
			k := min(b.n, (need+v-1)/v)
			need -= k * v
			s += k
		}
		if need > 0 {
			s = len(d.Nodes) + 1
		}
	} else {
		caps := p.scratch[:0]
		var walk func(*topotree.Domain)
		walk = func(x *topotree.Domain) {
			if len(x.Children) == 0 {
				caps = append(caps, p.capOf(x))
				return
			}
			for _, ch := range x.Children {
				walk(ch)
			}
		}
		walk(d)
		p.scratch = caps
		slices.SortFunc(caps, func(a, b int) int { return b - a })
		for _, c := range caps {
			if need <= 0 || c == 0 {
				break
			}
			need -= c
			s++
		}
		if need > 0 {
			s = len(caps) + 1
		}
	}
	return s
}

func (p *placer) parentCap(d *topotree.Domain) int {
	if d.Parent == nil {
		return p.clusterCap()
	}
	return p.capOf(d.Parent)
}

// distribute assigns n members below d (nil: the cluster): to one child
// if one can hold them all (the tightest), else greedily to the children
// with the most room, in multiples of their layer's podCountMultiple.
func (p *placer) distribute(d *topotree.Domain, n int, out map[string]int) error {
	var children []*topotree.Domain
	switch {
	case d == nil && len(p.t.Layers) == 0:
		if len(p.r.caps) > 0 {
			return p.fillCluster(n, out)
		}
	case d == nil:
		children = p.t.Roots
	case len(d.Nodes) > 0:
		return p.fillNodes(p.withRoom(d.Nodes), n, out)
	default:
		children = d.Children
	}
	var one []scope
	for _, c := range children {
		if cp := p.capOf(c); cp >= n {
			one = append(one, scope{d: c, cap: cp})
		}
	}
	if len(one) > 0 {
		return p.distribute(p.tightest(one, n).d, n, out)
	}
	order := slices.Clone(children)
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if p.placed[a] != p.placed[b] {
			return p.placed[a] > p.placed[b]
		}
		if ca, cb := p.capOf(a), p.capOf(b); ca != cb {
			return ca > cb
		}
		return a.Name < b.Name
	})
	left := n
	for _, c := range order {
		take := floorTo(min(p.capOf(c), left), p.mult[c.Layer])
		if take == 0 {
			continue
		}
		if err := p.distribute(c, take, out); err != nil {
			return err
		}
		left -= take
		if left == 0 {
			return nil
		}
	}
	if len(children) == 0 {
		return &Failure{Need: n, Fit: n - left, Detail: "no nodes left in the domain"}
	}
	layer := children[0].Layer
	return &Failure{Need: n, Fit: n - left, Detail: fmt.Sprintf("%d pods cannot be split into multiples of %d per %s domain", n, p.mult[layer], p.t.Layers[layer].Name)}
}

// withRoom keeps the nodes that can take a member: a node without room
// takes none wherever it stands in the order of fillNodes.
func (p *placer) withRoom(nodes []string) []string {
	m := p.mult[len(p.t.Layers)]
	var out []string
	for _, n := range nodes {
		if p.r.room(n, m) > 0 {
			out = append(out, n)
		}
	}
	return out
}

// fillNodes puts n members on nodes: nodes with members first, then the
// roomiest, so that the gang uses as few nodes as possible.
func (p *placer) fillNodes(nodes []string, n int, out map[string]int) error {
	takes, left := p.fill(nodes, n)
	for _, t := range takes {
		out[t.node] = t.n
	}
	if left > 0 {
		return &Failure{Need: n, Fit: n - left, Detail: fmt.Sprintf("only %d of %d pods fit on the nodes", n-left, n)}
	}
	return nil
}

type take struct {
	node string
	n    int
}

// fill orders nodes as fillNodes does and takes from each in turn.
func (p *placer) fill(nodes []string, n int) ([]take, int) {
	m := p.mult[len(p.t.Layers)]
	sort.Slice(nodes, func(i, j int) bool {
		a, b := nodes[i], nodes[j]
		if pa, pb := p.req.Placed[a], p.req.Placed[b]; pa != pb {
			return pa > pb
		}
		if ca, cb := p.r.room(a, m), p.r.room(b, m); ca != cb {
			return ca > cb
		}
		return a < b
	})
	var out []take
	left := n
	for _, node := range nodes {
		t := floorTo(min(p.r.room(node, m), left), m)
		if t == 0 {
			continue
		}
		out = append(out, take{node, t})
		if left -= t; left == 0 {
			break
		}
	}
	return out, left
}

// fillCluster is fillNodes over every node of a tree without layers. It
// first orders only the nodes with placed members and those roomy enough
// that together they hold n (read from the room's histogram): the order
// of fillNodes starts with them. Only when the members do not all fit
// there does it order every node.
func (p *placer) fillCluster(n int, out map[string]int) error {
	m := p.mult[0]
	least, sum := 1, 0
	for _, b := range p.r.all {
		if sum >= n {
			break
		}
		least = max(floorTo(b.v, m), 1)
		sum += floorTo(b.v, m) * b.n
	}
	var head []string
	for node, c := range p.r.caps {
		if v := floorTo(c, m); v >= least || (v > 0 && p.req.Placed[node] != 0) {
			head = append(head, node)
		}
	}
	takes, left := p.fill(head, n)
	pulledBack := false // a node with a negative count comes after every other
	for _, t := range takes {
		pulledBack = pulledBack || p.req.Placed[t.node] < 0
	}
	if (left > 0 || pulledBack) && least > 1 {
		var all []string
		for node, c := range p.r.caps {
			if floorTo(c, m) > 0 {
				all = append(all, node)
			}
		}
		takes, left = p.fill(all, n)
	}
	for _, t := range takes {
		out[t.node] = t.n
	}
	if left > 0 {
		return &Failure{Need: n, Fit: n - left, Detail: fmt.Sprintf("only %d of %d pods fit on the nodes", n-left, n)}
	}
	return nil
}
