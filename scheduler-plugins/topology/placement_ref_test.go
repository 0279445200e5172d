package topology

import (
	"fmt"
	"sort"

	"github.com/strata-sh/strata/internal/topotree"
)

// refPlacer is the placement algorithm as it was before the room
// aggregates (commit 553e467): every decision rebuilt the capacity of
// every domain from every node. It stays as the reference that Place is
// held to.
type refPlacer struct {
	t       *topotree.Tree
	req     Request
	mult    []int               // per layer index, node layer last
	strat   []topotree.Strategy // per layer index
	capOf   map[*topotree.Domain]int
	placed  map[*topotree.Domain]int
	nodeCap map[string]int
}

// refPlace chooses nodes for a gang: inside one domain of every topotree.MustGather
// layer, inside one domain of the lowest topotree.PreferGather layer that can hold
// it, in the tightest such domain (the one with the least spare capacity,
// then the one whose parent has the least), and across as few nodes as
// possible. It is linear in the nodes and domains of the tree plus a sort
// of each layer's candidates.
func refPlace(t *topotree.Tree, req Request) (*Plan, error) {
	p := &refPlacer{t: t, req: req, capOf: map[*topotree.Domain]int{}, placed: map[*topotree.Domain]int{}, nodeCap: map[string]int{}}
	nodeLayer := len(t.Layers)
	p.mult = make([]int, nodeLayer+1)
	p.strat = make([]topotree.Strategy, nodeLayer+1)
	for i := range p.mult {
		p.mult[i] = 1
	}
	for _, r := range req.Rules {
		i := t.LayerIndex(r.Layer)
		if i < 0 {
			return nil, fmt.Errorf("layer %q is not a layer of the cluster network topology", r.Layer)
		}
		if r.Strategy != topotree.MustGather && r.Strategy != topotree.PreferGather {
			return nil, fmt.Errorf("layer %s: strategy %q is neither %s nor %s", r.Layer, r.Strategy, topotree.MustGather, topotree.PreferGather)
		}
		p.strat[i] = r.Strategy
		if r.PodCountMultiple > 1 {
			p.mult[i] = r.PodCountMultiple
		}
	}
	if req.Pods <= 0 {
		return &Plan{Nodes: map[string]int{}}, nil
	}
	for n, c := range req.Capacity {
		if len(t.Layers) > 0 && t.Leaf[n] == nil {
			continue // not in the tree
		}
		p.nodeCap[n] = refFloorTo(c, p.mult[nodeLayer])
	}
	for _, r := range t.Roots {
		p.aggregate(r)
	}
	return p.place()
}

func refFloorTo(v, m int) int {
	if m <= 1 || v < 0 {
		return max(v, 0)
	}
	return v / m * m
}

func (p *refPlacer) aggregate(d *topotree.Domain) int {
	c, pl := 0, 0
	for _, n := range d.Nodes {
		c += p.nodeCap[n]
		pl += p.req.Placed[n]
	}
	for _, ch := range d.Children {
		c += p.aggregate(ch)
		pl += p.placed[ch]
	}
	c = refFloorTo(c, p.mult[d.Layer])
	p.capOf[d] = c
	p.placed[d] = pl
	return c
}

// refScope is a part of the cluster: a domain, or the cluster (d == nil).
type refScope struct {
	d   *topotree.Domain
	cap int
}

func (p *refPlacer) clusterCap() int {
	if len(p.t.Layers) == 0 {
		c := 0
		for _, v := range p.nodeCap {
			c += v
		}
		return c
	}
	c := 0
	for _, r := range p.t.Roots {
		c += p.capOf[r]
	}
	return c
}

func (p *refPlacer) place() (*Plan, error) {
	need := p.req.Pods
	nodeLayer := len(p.t.Layers)
	must := -1
	for i := nodeLayer; i >= 0; i-- {
		if p.strat[i] == topotree.MustGather {
			must = i
			break
		}
	}
	// The scopes the gang may use: one domain of the lowest topotree.MustGather
	// layer, or the cluster.
	if must == nodeLayer {
		return p.onOneNode(need)
	}
	var scopes []refScope
	if must < 0 {
		scopes = []refScope{{cap: p.clusterCap()}}
	} else {
		for _, d := range p.t.Domains[must] {
			scopes = append(scopes, refScope{d: d, cap: p.capOf[d]})
		}
		if p.totalPlaced() > 0 {
			scopes = p.withPlaced(scopes)
			if len(scopes) == 0 {
				return nil, &Failure{Layer: p.t.Layers[must].Name, Need: need, Detail: "members already placed span several domains"}
			}
		}
	}
	feasible := scopes[:0:0]
	best := refScope{cap: -1}
	for _, s := range scopes {
		if s.cap >= need {
			feasible = append(feasible, s)
		}
		if s.cap > best.cap || (s.cap == best.cap && s.d != nil && best.d != nil && s.d.Name < best.d.Name) {
			best = s
		}
	}
	if len(feasible) == 0 {
		f := &Failure{Need: need, Fit: max(best.cap, 0)}
		if must >= 0 {
			f.Layer = p.t.Layers[must].Name
			if best.d != nil {
				f.Domain = best.d.Name
			}
		}
		return nil, f
	}
	if p.strat[nodeLayer] == topotree.PreferGather {
		if plan, err := p.onOneNode(need); err == nil && p.inScopes(plan, feasible) {
			return plan, nil
		}
	}
	target := p.preferredTarget(must, feasible, need)
	plan := &Plan{Nodes: map[string]int{}}
	if target.d != nil {
		plan.Layer, plan.Domain = p.t.Layers[target.d.Layer].Name, target.d.Name
	}
	if err := p.distribute(target.d, need, plan.Nodes); err != nil {
		return nil, err
	}
	return plan, nil
}

// preferredTarget picks, inside the feasible scopes, a domain of the
// lowest topotree.PreferGather layer that holds the whole gang; failing that, the
// tightest feasible refScope.
func (p *refPlacer) preferredTarget(must int, feasible []refScope, need int) refScope {
	nodeLayer := len(p.t.Layers)
	inScope := func(d *topotree.Domain) bool {
		for _, s := range feasible {
			if s.d == nil || refIsUnder(d, s.d) {
				return true
			}
		}
		return false
	}
	for layer := nodeLayer - 1; layer > must; layer-- {
		if p.strat[layer] != topotree.PreferGather {
			continue
		}
		var cands []refScope
		for _, d := range p.t.Domains[layer] {
			if p.capOf[d] >= need && inScope(d) {
				cands = append(cands, refScope{d: d, cap: p.capOf[d]})
			}
		}
		if len(cands) > 0 {
			return p.tightest(cands, need)
		}
	}
	return p.tightest(feasible, need)
}

// tightest orders candidates: those holding placed members first, then
// the fewest lowest-layer switches the gang would span inside them (a
// domain whose room sits in a few big blocks beats one with the same room
// in many small ones), then the least spare capacity, then the parent
// with the least capacity (keeping emptier parents whole), then name.
func (p *refPlacer) tightest(c []refScope, need int) refScope {
	span := make(map[*topotree.Domain]int, len(c))
	for _, s := range c {
		if s.d != nil {
			span[s.d] = p.span(s.d, need)
		}
	}
	sort.Slice(c, func(i, j int) bool {
		a, b := c[i], c[j]
		if a.d == nil || b.d == nil {
			return a.d == nil
		}
		if pa, pb := p.placed[a.d], p.placed[b.d]; pa != pb {
			return pa > pb
		}
		if sa, sb := span[a.d], span[b.d]; sa != sb {
			return sa < sb
		}
		if a.cap != b.cap {
			return a.cap < b.cap
		}
		if ca, cb := p.parentCap(a.d), p.parentCap(b.d); ca != cb {
			return ca < cb
		}
		return a.d.Name < b.d.Name
	})
	return c[0]
}

// span counts the domains of the lowest layer (the switches right above
// the nodes) that need members take inside d at the fewest: the roomiest
// first, which is the minimum. For a domain of the lowest layer itself it
// counts nodes.
func (p *refPlacer) span(d *topotree.Domain, need int) int {
	var caps []int
	if len(d.Children) == 0 {
		for _, n := range d.Nodes {
			caps = append(caps, p.nodeCap[n])
		}
	} else {
		var walk func(*topotree.Domain)
		walk = func(x *topotree.Domain) {
			if len(x.Children) == 0 {
				caps = append(caps, p.capOf[x])
				return
			}
			for _, ch := range x.Children {
				walk(ch)
			}
		}
		walk(d)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(caps)))
	n := 0
	for _, c := range caps {
		if need <= 0 || c == 0 {
			break
		}
		need -= c
		n++
	}
	if need > 0 {
		return len(caps) + 1 // cannot hold them
	}
	return n
}

func (p *refPlacer) parentCap(d *topotree.Domain) int {
	if d.Parent == nil {
		return p.clusterCap()
	}
	return p.capOf[d.Parent]
}

// distribute assigns n members below d (nil: the cluster): to one child
// if one can hold them all (the tightest), else greedily to the children
// with the most room, in multiples of their layer's podCountMultiple.
func (p *refPlacer) distribute(d *topotree.Domain, n int, out map[string]int) error {
	var children []*topotree.Domain
	var nodes []string
	switch {
	case d == nil && len(p.t.Layers) == 0:
		for name := range p.nodeCap {
			nodes = append(nodes, name)
		}
	case d == nil:
		children = p.t.Roots
	default:
		children, nodes = d.Children, d.Nodes
	}
	if len(nodes) > 0 {
		return p.fillNodes(nodes, n, out)
	}
	var one []refScope
	for _, c := range children {
		if p.capOf[c] >= n {
			one = append(one, refScope{d: c, cap: p.capOf[c]})
		}
	}
	if len(one) > 0 {
		return p.distribute(p.tightest(one, n).d, n, out)
	}
	order := append([]*topotree.Domain(nil), children...)
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if p.placed[a] != p.placed[b] {
			return p.placed[a] > p.placed[b]
		}
		if p.capOf[a] != p.capOf[b] {
			return p.capOf[a] > p.capOf[b]
		}
		return a.Name < b.Name
	})
	left := n
	for _, c := range order {
		take := refFloorTo(min(p.capOf[c], left), p.mult[c.Layer])
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

// inScopes reports whether every node of a plan is inside one of scopes.
func (p *refPlacer) inScopes(plan *Plan, scopes []refScope) bool {
	for node := range plan.Nodes {
		ok := false
		for _, s := range scopes {
			if s.d == nil || refIsUnder(p.t.Leaf[node], s.d) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// fillNodes puts n members on nodes: nodes with members first, then the
// roomiest, so that the gang uses as few nodes as possible.
func (p *refPlacer) fillNodes(nodes []string, n int, out map[string]int) error {
	order := append([]string(nil), nodes...)
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if p.req.Placed[a] != p.req.Placed[b] {
			return p.req.Placed[a] > p.req.Placed[b]
		}
		if p.nodeCap[a] != p.nodeCap[b] {
			return p.nodeCap[a] > p.nodeCap[b]
		}
		return a < b
	})
	m := p.mult[len(p.t.Layers)]
	left := n
	for _, node := range order {
		take := refFloorTo(min(p.nodeCap[node], left), m)
		if take == 0 {
			continue
		}
		out[node] = take
		left -= take
		if left == 0 {
			return nil
		}
	}
	return &Failure{Need: n, Fit: n - left, Detail: fmt.Sprintf("only %d of %d pods fit on the nodes", n-left, n)}
}

// onOneNode places the whole gang on one node (topotree.MustGather on the node
// layer).
func (p *refPlacer) onOneNode(need int) (*Plan, error) {
	bestNode, bestCap := "", -1
	var cands []string
	for n, c := range p.nodeCap {
		if p.totalPlaced() > 0 && p.req.Placed[n] == 0 {
			continue
		}
		if c >= need {
			cands = append(cands, n)
		}
		if c > bestCap || (c == bestCap && n < bestNode) {
			bestNode, bestCap = n, c
		}
	}
	if len(cands) == 0 {
		return nil, &Failure{Layer: "NodeTopologyLayer", Domain: bestNode, Fit: max(bestCap, 0), Need: need}
	}
	sort.Slice(cands, func(i, j int) bool {
		if p.nodeCap[cands[i]] != p.nodeCap[cands[j]] {
			return p.nodeCap[cands[i]] < p.nodeCap[cands[j]]
		}
		return cands[i] < cands[j]
	})
	return &Plan{Nodes: map[string]int{cands[0]: need}, Layer: "NodeTopologyLayer", Domain: cands[0]}, nil
}

func (p *refPlacer) totalPlaced() int {
	t := 0
	for _, v := range p.req.Placed {
		t += v
	}
	return t
}

// withPlaced keeps the scopes that hold every placed member.
func (p *refPlacer) withPlaced(scopes []refScope) []refScope {
	total := p.totalPlaced()
	var out []refScope
	for _, s := range scopes {
		if p.placed[s.d] == total {
			out = append(out, s)
		}
	}
	return out
}

func refIsUnder(d, ancestor *topotree.Domain) bool {
	for ; d != nil; d = d.Parent {
		if d == ancestor {
			return true
		}
	}
	return false
}
