// Package topology chooses where the pods of a gang go in the tree of
// network domains (package topotree): inside the domains its rules ask
// for, in the tightest of them, across as few nodes as possible. It
// knows nothing of the scheduler framework; capacities come in as plain
// numbers.
package topology

import (
	"fmt"

	"github.com/strata-sh/strata/internal/topotree"
)

// Request is what a gang asks of the tree.
type Request struct {
	// Pods is the number of members to place now.
	Pods int
	// Capacity is how many more members each node can take. Room.Place
	// does not read it: the room's capacities are used.
	Capacity map[string]int
	// Placed counts members already bound or running per node; they pull
	// new members toward their domains, and a MustGather domain must
	// contain them.
	Placed map[string]int
	Rules  []topotree.Rule
}

// Plan is where the members go.
type Plan struct {
	// Nodes maps node name to the number of members it gets.
	Nodes map[string]int
	// Layer and Domain name the smallest domain holding all members;
	// empty when they span the cluster.
	Layer, Domain string
}

// Failure says why a gang cannot be placed, in terms a user can act on.
type Failure struct {
	// Layer is the layer whose rule failed; empty for the whole cluster.
	Layer string
	// Domain is the domain that came closest, and Fit how many of Need
	// members it could take.
	Domain    string
	Fit, Need int
	// Detail adds what else went wrong.
	Detail string
}

func (f *Failure) Error() string {
	where := "the cluster"
	if f.Layer != "" {
		where = fmt.Sprintf("any %s domain", f.Layer)
	}
	msg := fmt.Sprintf("%d pods do not fit in %s", f.Need, where)
	if f.Domain != "" {
		msg += fmt.Sprintf("; closest %s: %d of %d pods fit", f.Domain, f.Fit, f.Need)
	} else if f.Layer == "" {
		msg += fmt.Sprintf(": %d of %d pods fit", f.Fit, f.Need)
	}
	if f.Detail != "" {
		msg += "; " + f.Detail
	}
	return msg
}

// Place chooses nodes for a gang: inside one domain of every MustGather
// layer, inside one domain of the lowest PreferGather layer that can hold
// it, in the tightest such domain (see tightest), and across as few nodes
// as possible. It reads req.Capacity once to sum it up the tree; a caller
// that keeps a Room across decisions saves that too (Room.Place).
func Place(t *topotree.Tree, req Request) (*Plan, error) {
	p, plan, err := newPlacer(t, req)
	if p == nil {
		return plan, err
	}
	p.r = borrowRoom(t, req.Capacity)
	return p.place()
}

// Place is the package's Place over the room's capacities instead of
// req.Capacity. It walks the domains that can hold the gang (a subtree
// whose room is short of the gang is skipped whole) and the nodes of the
// domains it fills, not every node; only a rule on the node layer
// compares nodes across the tree.
func (r *Room) Place(req Request) (*Plan, error) {
	p, plan, err := newPlacer(r.t, req)
	if p == nil {
		return plan, err
	}
	p.r = r
	return p.place()
}

// placer holds the per-request state of a placement.
type placer struct {
	t     *topotree.Tree
	r     *Room
	req   Request
	mult  []int               // per layer index, node layer last
	strat []topotree.Strategy // per layer index
	// simple: no podCountMultiple above 1, so a domain's capacity is the
	// room's sum; otherwise capacities are floored level by level and
	// memoised in caps.
	simple  bool
	caps    map[*topotree.Domain]int
	cluster int                      // the cluster's capacity; -1 until needed
	placed  map[*topotree.Domain]int // req.Placed summed up the tree
	total   int                      // every member of req.Placed
	scratch []int                    // span's room per block, reused
}

// newPlacer checks the rules; with no pods to place it returns the empty
// plan and no placer.
func newPlacer(t *topotree.Tree, req Request) (*placer, *Plan, error) {
	nodeLayer := len(t.Layers)
	p := &placer{t: t, req: req, simple: true, cluster: -1}
	p.mult = make([]int, nodeLayer+1)
	p.strat = make([]topotree.Strategy, nodeLayer+1)
	for i := range p.mult {
		p.mult[i] = 1
	}
	for _, r := range req.Rules {
		i := t.LayerIndex(r.Layer)
		if i < 0 {
			return nil, nil, fmt.Errorf("layer %q is not a layer of the cluster network topology", r.Layer)
		}
		if r.Strategy != topotree.MustGather && r.Strategy != topotree.PreferGather {
			return nil, nil, fmt.Errorf("layer %s: strategy %q is neither %s nor %s", r.Layer, r.Strategy, topotree.MustGather, topotree.PreferGather)
		}
		p.strat[i] = r.Strategy
		if r.PodCountMultiple > 1 {
			p.mult[i] = r.PodCountMultiple
			p.simple = false
		}
	}
	if req.Pods <= 0 {
		return nil, &Plan{Nodes: map[string]int{}}, nil
	}
	if !p.simple {
		p.caps = map[*topotree.Domain]int{}
	}
	if len(req.Placed) > 0 {
		p.placed = map[*topotree.Domain]int{}
	}
	for n, v := range req.Placed {
		p.total += v
		for d := t.Leaf[n]; d != nil; d = d.Parent {
			p.placed[d] += v
		}
	}
	return p, nil, nil
}

func floorTo(v, m int) int {
	if m <= 1 || v < 0 {
		return max(v, 0)
	}
	return v / m * m
}

// capOf is how many members fit below d: the room of its nodes floored
// to the node layer's multiple, summed and floored layer by layer.
func (p *placer) capOf(d *topotree.Domain) int {
	if p.simple {
		return p.r.sum[d.Index]
	}
	if c, ok := p.caps[d]; ok {
		return c
	}
	c := 0
	if len(d.Children) == 0 {
		c = histRoom(p.r.hist[d.Index], p.mult[len(p.t.Layers)])
	}
	for _, ch := range d.Children {
		c += p.capOf(ch)
	}
	c = floorTo(c, p.mult[d.Layer])
	p.caps[d] = c
	return c
}

func (p *placer) clusterCap() int {
	if p.cluster >= 0 {
		return p.cluster
	}
	c := 0
	switch {
	case len(p.t.Layers) == 0:
		c = histRoom(p.r.all, p.mult[0])
	default:
		for _, r := range p.t.Roots {
			c += p.capOf(r)
		}
	}
	p.cluster = c
	return c
}

// scope is a part of the cluster: a domain, or the cluster (d == nil).
type scope struct {
	d   *topotree.Domain
	cap int
}

// search returns the domains of a layer below from (nil: the roots)
// that hold need members. A subtree whose room is short of need is
// skipped whole: flooring only ever lowers a capacity below the room.
func (p *placer) search(from []*topotree.Domain, layer, need int) []scope {
	if from == nil {
		from = p.t.Roots
	}
	var out []scope
	var walk func(*topotree.Domain)
	walk = func(d *topotree.Domain) {
		if p.r.sum[d.Index] < need {
			return
		}
		if d.Layer == layer {
			if c := p.capOf(d); c >= need {
				out = append(out, scope{d: d, cap: c})
			}
			return
		}
		for _, ch := range d.Children {
			walk(ch)
		}
	}
	for _, d := range from {
		walk(d)
	}
	return out
}

func (p *placer) place() (*Plan, error) {
	need := p.req.Pods
	nodeLayer := len(p.t.Layers)
	must := -1
	for i := nodeLayer; i >= 0; i-- {
		if p.strat[i] == topotree.MustGather {
			must = i
			break
		}
	}
	// The scopes the gang may use: one domain of the lowest MustGather
	// layer, or the cluster.
	if must == nodeLayer {
		return p.onOneNode(need)
	}
	feasible, f := p.scopes(must, need)
	if f != nil {
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

// scopes returns the scopes of layer must (the cluster if must < 0) that
// hold need members, or why there are none: the scope that came closest.
// With members already placed, only a scope holding all of them counts.
func (p *placer) scopes(must, need int) ([]scope, *Failure) {
	var all, feasible []scope
	switch {
	case must < 0:
		all = []scope{{cap: p.clusterCap()}}
	case p.total > 0:
		for d, v := range p.placed {
			if d.Layer == must && v == p.total {
				all = append(all, scope{d: d, cap: p.capOf(d)})
			}
		}
		if len(all) == 0 {
			return nil, &Failure{Layer: p.t.Layers[must].Name, Need: need, Detail: "members already placed span several domains"}
		}
	default:
		if feasible = p.search(nil, must, need); len(feasible) > 0 {
			return feasible, nil
		}
		for _, d := range p.t.Domains[must] {
			all = append(all, scope{d: d, cap: p.capOf(d)})
		}
	}
	best := scope{cap: -1}
	for _, s := range all {
		if s.cap >= need {
			feasible = append(feasible, s)
		}
		if s.cap > best.cap || (s.cap == best.cap && s.d != nil && best.d != nil && s.d.Name < best.d.Name) {
			best = s
		}
	}
	if len(feasible) > 0 {
		return feasible, nil
	}
	f := &Failure{Need: need, Fit: max(best.cap, 0)}
	if must >= 0 {
		f.Layer = p.t.Layers[must].Name
		if best.d != nil {
			f.Domain = best.d.Name
		}
	}
	return nil, f
}

// preferredTarget picks, inside the feasible scopes, a domain of the
// lowest PreferGather layer that holds the whole gang; failing that, the
// tightest feasible scope.
func (p *placer) preferredTarget(must int, feasible []scope, need int) scope {
	var from []*topotree.Domain
	for _, s := range feasible {
		if s.d != nil {
			from = append(from, s.d)
		}
	}
	for layer := len(p.t.Layers) - 1; layer > must; layer-- {
		if p.strat[layer] != topotree.PreferGather {
			continue
		}
		if cands := p.search(from, layer, need); len(cands) > 0 {
			return p.tightest(cands, need)
		}
	}
	return p.tightest(feasible, need)
}

// inScopes reports whether every node of a plan is inside one of scopes.
func (p *placer) inScopes(plan *Plan, scopes []scope) bool {
	for node := range plan.Nodes {
		ok := false
		for _, s := range scopes {
			if s.d == nil || isUnder(p.t.Leaf[node], s.d) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func isUnder(d, ancestor *topotree.Domain) bool {
	for ; d != nil; d = d.Parent {
		if d == ancestor {
			return true
		}
	}
	return false
}
