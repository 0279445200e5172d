package gang

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/internal/topotree"
	"github.com/strata-sh/strata/scheduler-plugins/topology"
)

// planTTL bounds how long a placement plan is reused before it is
// computed again from the cluster's current state.
const planTTL = 30 * time.Second

// plan is where a gang's pending members go, per shape.
type plan struct {
	created time.Time
	// remaining counts, per shape and node, the members still to come.
	remaining map[string]map[string]int
	assigned  map[types.UID]slot
	where     string
	// priority of the member that made the plan.
	priority int32
}

// slot is the room a reserved member took.
type slot struct{ shape, node string }

// nodes returns the nodes with room left for members of a shape.
func (p *plan) nodes(shape string) sets.Set[string] {
	out := sets.New[string]()
	for n, c := range p.remaining[shape] {
		if c > 0 {
			out.Insert(n)
		}
	}
	return out
}

// gangShapes groups the gang's pending members (neither bound nor waiting
// in Permit) by shape, scarcest first, and counts the members already
// placed per node. pod, the member being scheduled, is always pending.
func (p *Plugin) gangShapes(g *gangSpec, pod *corev1.Pod) ([]*shape, map[string]int) {
	byKey := map[string]*shape{}
	placed := map[string]int{}
	add := func(m *corev1.Pod) {
		k := p.shapeOf(m)
		s := byKey[k]
		if s == nil {
			s = &shape{key: k, pod: m}
			byKey[k] = s
		}
		s.pending++
		if m.UID == pod.UID || (s.pod.UID != pod.UID && m.Name < s.pod.Name) {
			s.pod = m // the member being scheduled, else the first by name
		}
	}
	seen := false
	for _, m := range p.members(g.key) {
		switch {
		case m.Spec.NodeName != "":
			placed[m.Spec.NodeName]++
		case m.UID == pod.UID:
			seen = true
			add(m)
		case !p.isWaiting(m.UID):
			add(m)
		}
	}
	if !seen {
		add(pod)
	}
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if gangKeyOf(wp.GetPod()) == g.key {
			if node := wp.GetPod().Spec.NodeName; node != "" {
				placed[node]++
			}
		}
	})
	shapes := make([]*shape, 0, len(byKey))
	for _, s := range byKey {
		shapes = append(shapes, s)
	}
	sortShapes(shapes)
	return shapes, placed
}

// placement is where every shape of a gang goes.
type placement struct {
	byShape map[string]map[string]int
	// layer and domain: the smallest domain holding the scarcest shape.
	layer, domain string
}

// nodes adds up the members per node over all shapes.
func (pl *placement) nodes() map[string]int {
	out := map[string]int{}
	for _, m := range pl.byShape {
		for n, c := range m {
			out[n] += c
		}
	}
	return out
}

// placeFailure is why a gang has no placement: the topology's Failure or
// another error, with the shape that did not fit.
type placeFailure struct {
	err       error
	shortfall string
	shape     *shape
	shapes    int
}

func (f *placeFailure) Error() string {
	msg := f.err.Error()
	if f.shapes > 1 {
		msg = fmt.Sprintf("%s like %s: %s", plural(f.shape.pending, "member"), f.shape.pod.Name, msg)
	}
	if f.shortfall != "" {
		msg += "; " + f.shortfall
	}
	return msg
}

func (f *placeFailure) Unwrap() error { return f.err }

// maxDomainRetries bounds how many domains of the scarcest shape are tried
// when a later shape finds no room beside it.
const maxDomainRetries = 4

// place finds room for every shape of a gang: the scarcest shape first,
// under the gang's rules, then each other shape in the room the shapes
// before it left, pulled into their domains (the members planned so far
// count as placed, so a MustGather domain must hold them all, and
// PreferGather and node choice favour them). podCountMultiple applies to
// the scarcest shape only: a launcher does not break a gang of 8 workers
// into multiples of 9. If a later shape does not fit beside the first,
// the first is moved out of that domain and tried again.
//
// adj simulates evictions (nil: the cluster as it is); probes bound each
// shape by the Filter plugins; blocked nodes hold room nominated to gangs
// of higher priority and take no member.
func (p *Plugin) place(ctx context.Context, g *gangSpec, shapes []*shape, placed map[string]int, nodes []fwk.NodeInfo, tree *topotree.Tree, adj *adjustment, probes map[string]*filterProbe, blocked sets.Set[string]) (*placement, error) {
	byName := make(map[string]fwk.NodeInfo, len(nodes))
	for _, ni := range nodes {
		byName[ni.Node().Name] = ni
	}
	excluded := sets.New[string]()
	for attempt := 0; ; attempt++ {
		out := &placement{byShape: map[string]map[string]int{}}
		cur := adj
		sofar := maps.Clone(placed)
		for i, s := range shapes {
			capacity, shortfall, err := p.capacity.capacities(ctx, s.pod, s.pending, nodes, cur, probes[s.key])
			if err != nil {
				return nil, err
			}
			for n := range blocked {
				capacity[n] = 0
			}
			rules := g.rules
			if i == 0 {
				for n := range excluded {
					capacity[n] = 0
				}
			} else {
				rules = withoutMultiples(rules)
			}
			res, err := topology.Place(tree, topology.Request{Pods: s.pending, Capacity: capacity, Placed: sofar, Rules: rules})
			if err != nil {
				var tf *topology.Failure
				if i > 0 && errors.As(err, &tf) && attempt < maxDomainRetries && out.domain != "" {
					excluded.Insert(nodesIn(tree, out.layer, out.domain, out.byShape[shapes[0].key])...)
					break
				}
				return nil, &placeFailure{err: err, shortfall: shortfall, shape: s, shapes: len(shapes)}
			}
			out.byShape[s.key] = res.Nodes
			if i == 0 {
				out.layer, out.domain = res.Layer, res.Domain
			}
			for n, c := range res.Nodes {
				sofar[n] += c
			}
			if i == len(shapes)-1 {
				return out, nil
			}
			if cur, err = p.capacity.consume(ctx, s.pod, res.Nodes, byName, cur); err != nil {
				return nil, err
			}
		}
	}
}

// withoutMultiples drops podCountMultiple from rules.
func withoutMultiples(rules []topotree.Rule) []topotree.Rule {
	out := make([]topotree.Rule, len(rules))
	for i, r := range rules {
		r.PodCountMultiple = 0
		out[i] = r
	}
	return out
}

// nodesIn lists the nodes of a domain (a node itself on the node layer).
func nodesIn(tree *topotree.Tree, layer, domain string, planned map[string]int) []string {
	i := tree.LayerIndex(layer)
	if i < 0 || i == len(tree.Layers) {
		return sortedNodes(planned)
	}
	var out []string
	for n := range tree.Leaf {
		if d := tree.Ancestor(n, i); d != nil && d.Name == domain {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// probesFor runs PreFilter once per shape for the Filter-plugin probes.
func (p *Plugin) probesFor(ctx context.Context, shapes []*shape) map[string]*filterProbe {
	out := make(map[string]*filterProbe, len(shapes))
	for _, s := range shapes {
		if pr := newFilterProbe(ctx, p.handle, s.pod); pr != nil {
			out[s.key] = pr
		}
	}
	return out
}

// computePlan places the gang's pending members. It runs without the
// plugin's lock; what it records (the failure) it records under it.
func (p *Plugin) computePlan(ctx context.Context, pod *corev1.Pod, g *gangSpec, nodes []fwk.NodeInfo) (*plan, *fwk.Status) {
	logger := klog.FromContext(ctx)
	gen := p.snapshotGeneration(nodes)
	fail := func(msg string, final bool, cause error) (*plan, *fwk.Status) {
		f := failure{msg: msg, final: final, gen: gen, at: time.Now()}
		if pending := (*claimPendingError)(nil); errors.As(cause, &pending) {
			// What ends this wait is a member's status naming its claim,
			// which moves no generation of the snapshot: the next member
			// must look again, not be answered from this failure.
			f.at = time.Time{}
		}
		p.mu.Lock()
		p.failures[g.key] = f
		p.mu.Unlock()
		if final {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	shapes, placed := p.gangShapes(g, pod)
	tree, err := p.tree(nodes)
	if err != nil {
		return fail(err.Error(), true, err)
	}
	prio := corev1helpers.PodPriority(pod)
	group := p.confined(g).group
	blocked := p.reservedOutside(prio, g.key, group).Union(p.plannedNodes(prio, g.key, group))
	res, err := p.place(ctx, g, shapes, placed, nodes, tree, p.groupRoom(ctx, g.key, group, nodes), p.probesFor(ctx, shapes), blocked)
	if err != nil {
		msg := fmt.Sprintf("gang %s: %v", g.key, err)
		var tf *topology.Failure
		var pf *placeFailure
		// A rule naming a missing layer: no retry, and no eviction, helps
		// until the PodGroup or the topology changes.
		return fail(msg, errors.As(err, &pf) && !errors.As(err, &tf), err)
	}
	where := "the cluster"
	if res.domain != "" {
		where = res.layer + " " + res.domain
	}
	logger.V(2).Info("Gang placement planned", "gang", g.key, "shapes", len(shapes), "where", where, "nodes", len(res.nodes()))
	return &plan{created: time.Now(), remaining: res.byShape, assigned: map[types.UID]slot{}, where: where, priority: prio}, nil
}

// plannedNodes lists the nodes where live plans of gangs outside the
// gang's group (its confined group, the gang itself included), of at
// least prio, still expect members: two gangs planned one after the other
// must not both count the same room and then both time out half
// reserved. The gangs of its own group are placed together: the room
// their plans expect is counted by groupRoom instead.
func (p *Plugin) plannedNodes(prio int32, gang string, group []string) sets.Set[string] {
	in := sets.New(group...)
	p.mu.Lock()
	defer p.mu.Unlock()
	out := sets.New[string]()
	for key, pl := range p.plans {
		if key == gang || in.Has(key) || pl.priority < prio || time.Since(pl.created) > planTTL {
			continue
		}
		for _, nodes := range pl.remaining {
			for n, c := range nodes {
				if c > 0 {
					out.Insert(n)
				}
			}
		}
	}
	return out
}

// reservedOutside lists the nodes whose freed room is nominated to gangs
// outside the gang's group and reserved against prio. Room nominated to
// a gang of the group does not keep the group's other gangs off a node:
// they are placed together, and the nominated members' room is counted by
// groupRoom.
//
// Nominations are looked up by the gang they leave out: a node that is
// no longer listed when a gang of the group is left out is held by that
// gang alone. A node held by more than one gang stays blocked unless no
// gang outside the group holds a nomination at all.
func (p *Plugin) reservedOutside(prio int32, gang string, group []string) sets.Set[string] {
	out := p.reservedNodes(prio, gang)
	if len(group) < 2 || out.Len() == 0 {
		return out
	}
	if sets.New(group...).IsSuperset(sets.New(p.jobs.Gangs()...)) {
		return sets.New[string]()
	}
	every := p.reservedNodes(prio, "")
	for _, k := range group {
		if k != gang {
			out = out.Difference(every.Difference(p.reservedNodes(prio, k)))
		}
	}
	return out
}

// groupRoom returns the room the other gangs of the gang's group are
// expected to take, as an adjustment for place (nil: none): the members
// their live plans still expect, per node, and, for a gang without a live
// plan that holds a nomination, its members on their nominated nodes.
// Only members neither bound, held in Permit nor let go count: the others
// are in the snapshot already. A gang whose room cannot be worked out
// (its claims not created yet) is left out; its own plan finds out why.
func (p *Plugin) groupRoom(ctx context.Context, gang string, group []string, nodes []fwk.NodeInfo) *adjustment {
	if len(group) < 2 {
		return nil
	}
	byName := make(map[string]fwk.NodeInfo, len(nodes))
	for _, ni := range nodes {
		byName[ni.Node().Name] = ni
	}
	var adj *adjustment
	for _, k := range group {
		if k == gang {
			continue
		}
		for _, e := range p.expectedRoom(k) {
			if next, err := p.capacity.consume(ctx, e.pod, e.nodes, byName, adj); err == nil {
				adj = next
			} else {
				klog.FromContext(ctx).V(4).Info("Room of a gang of the group not counted", "gang", gang, "other", k, "err", err)
			}
		}
	}
	return adj
}

// expected is where members of one shape of a gang are expected: pod is
// one of them, nodes counts them per node.
type expected struct {
	pod   *corev1.Pod
	nodes map[string]int
}

// expectedRoom lists, per shape, where a gang's pending members are
// expected: where its live plan still has room for them or, without one,
// on their nominated nodes while the gang holds a nomination.
func (p *Plugin) expectedRoom(key string) []expected {
	members := p.members(key)
	allowed := sets.New[types.UID]()
	p.mu.Lock()
	for _, m := range members {
		if _, ok := p.allowed[m.UID]; ok {
			allowed.Insert(m.UID)
		}
	}
	p.mu.Unlock()
	pending := map[string]*corev1.Pod{}
	nominated := map[string]map[string]int{}
	for _, m := range members {
		if m.Spec.NodeName != "" || allowed.Has(m.UID) || p.isWaiting(m.UID) {
			continue
		}
		k := p.shapeOf(m)
		if pending[k] == nil || m.Name < pending[k].Name {
			pending[k] = m
		}
		if n := m.Status.NominatedNodeName; n != "" {
			if nominated[k] == nil {
				nominated[k] = map[string]int{}
			}
			nominated[k][n]++
		}
	}
	if len(pending) == 0 {
		return nil
	}
	byShape := map[string]map[string]int{}
	p.mu.Lock()
	if pl := p.plans[key]; pl != nil && time.Since(pl.created) <= planTTL {
		for shape, nodes := range pl.remaining {
			for n, c := range nodes {
				if c > 0 {
					if byShape[shape] == nil {
						byShape[shape] = map[string]int{}
					}
					byShape[shape][n] = c
				}
			}
		}
	}
	p.mu.Unlock()
	if len(byShape) == 0 && p.jobs.Nominated(key) {
		byShape = nominated
	}
	var out []expected
	for _, shape := range slices.Sorted(maps.Keys(byShape)) {
		if pod := pending[shape]; pod != nil {
			out = append(out, expected{pod: pod, nodes: byShape[shape]})
		}
	}
	return out
}

// snapshotGeneration identifies the state a plan was made on: every
// change to a node's pods or resources raises its generation past every
// other, and claims and slices (which do not touch nodes: a claim
// deallocated after its pod went) are counted apart.
//
// Events that change a gang's answer without touching the snapshot (a
// member's status naming its claims, its PodGroup or the topology edited)
// count too: a member queued again by one of them computes the plan
// again, where an answer from the last failure would send it back to
// wait for the queue's periodic flush.
func (p *Plugin) snapshotGeneration(nodes []fwk.NodeInfo) [3]int64 {
	var g int64
	for _, ni := range nodes {
		g = max(g, ni.GetGeneration())
	}
	return [3]int64{g, p.draGen.Load(), p.requeued.Load()}
}

// failFastWindow is how long a gang's failed plan answers its other
// members while the snapshot is unchanged: a gang of hundreds that cannot
// fit fails once per round, not once per member, and does not hold the
// scheduler from the work that can fit.
const failFastWindow = 5 * time.Second

// recentFailure returns the gang's failure if it was computed on the same
// snapshot moments ago.
func (p *Plugin) recentFailure(key string, nodes []fwk.NodeInfo) (failure, bool) {
	p.mu.Lock()
	f, ok := p.failures[key]
	p.mu.Unlock()
	if !ok || f.at.IsZero() || time.Since(f.at) > failFastWindow || f.gen != p.snapshotGeneration(nodes) {
		return failure{}, false
	}
	return f, true
}

// tree builds the network tree of the candidate nodes from the
// ClusterNetworkTopology; without one the cluster is flat.
func (p *Plugin) tree(nodes []fwk.NodeInfo) (*topotree.Tree, error) {
	var layers []topotree.Layer
	if t := p.src.topology(); t != nil {
		var err error
		if layers, err = topotree.Layers(t.Spec); err != nil {
			return nil, fmt.Errorf("ClusterNetworkTopology %s: %w", t.Name, err)
		}
	}
	in := make([]topotree.Node, 0, len(nodes))
	for _, ni := range nodes {
		if n := ni.Node(); n != nil {
			in = append(in, topotree.Node{Name: n.Name, Labels: n.Labels})
		}
	}
	return topotree.Build(layers, in), nil
}

// reservedStateKey carries reservedOutside from PreFilter to Filter for
// a member of a gang group while gangs hold nominations.
const reservedStateKey fwk.StateKey = Name + "/reserved-outside-group"

type reservedState struct{ nodes sets.Set[string] }

func (s *reservedState) Clone() fwk.StateData { return s }

// noteReservedOutside records for Filter which nominated room the
// member's group must leave alone.
func (p *Plugin) noteReservedOutside(state fwk.CycleState, pod *corev1.Pod, g *gangSpec) {
	if len(g.group) < 2 || !p.hasNominations() {
		return
	}
	group := p.confined(g).group
	state.Write(reservedStateKey, &reservedState{nodes: p.reservedOutside(corev1helpers.PodPriority(pod), g.key, group)})
}

// leftToGroup reports whether the room nominated on node is held only for
// gangs of the member's own group, as PreFilter found.
func leftToGroup(state fwk.CycleState, node string) bool {
	if state == nil {
		return false
	}
	v, err := state.Read(reservedStateKey)
	if err != nil {
		return false
	}
	return !v.(*reservedState).nodes.Has(node)
}
