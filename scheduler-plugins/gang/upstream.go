package gang

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// The upstream workload API (scheduling.k8s.io/v1beta1 PodGroups, with
// v1alpha3 CompositePodGroups above them) is honoured when a cluster
// serves it. The scheduler's own GangScheduling plugin holds a group until
// minCount pods exist and binds it all or nothing in one pod-group cycle,
// trying the group in each placement (a domain of its topology key, and
// for a composite, the domains of its children's keys inside each of its
// own) that a placement generator proposes. StrataGang is that generator
// in Strata's profile: it proposes only the domains where the group fits
// by DRA-aware capacity — the devices each member's claims need, free on
// the nodes — tightest first, and scores the tightest highest, so a group
// lands in the smallest domain that holds it at every topology level, and
// the scheduler does not spend a full trial on domains that cannot.

// upstreamPodGroup returns a scheduling.k8s.io/v1beta1 PodGroup when the
// cluster serves that API (GenericWorkload gate), else nil.
func (p *Plugin) upstreamPodGroup(namespace, name string) *schedulingv1beta1.PodGroup {
	if p.upstream == nil {
		return nil
	}
	pg, err := p.upstream.PodGroups(namespace).Get(name)
	if err != nil {
		return nil
	}
	return pg
}

// ancestors returns the CompositePodGroups above an upstream PodGroup,
// innermost first; a missing one ends the chain (the in-tree plugin keeps
// the group waiting until it exists).
func (p *Plugin) ancestors(pg *schedulingv1beta1.PodGroup) []*schedulingv1alpha3.CompositePodGroup {
	if p.composites == nil || pg.Spec.ParentCompositePodGroupName == nil {
		return nil
	}
	var out []*schedulingv1alpha3.CompositePodGroup
	seen := map[string]bool{}
	for name := *pg.Spec.ParentCompositePodGroupName; name != "" && !seen[name]; {
		seen[name] = true
		c, err := p.composites.CompositePodGroups(pg.Namespace).Get(name)
		if err != nil {
			break
		}
		out = append(out, c)
		name = ptr.Deref(c.Spec.ParentCompositePodGroupName, "")
	}
	return out
}

// placementSpares remembers, per group and placement, how much room a
// proposed placement leaves, for ScorePlacement.
type placementSpares struct {
	mu    sync.Mutex
	spare map[string]int // group key + "/" + placement name
}

func (s *placementSpares) set(group, placement string, spare int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == nil {
		s.spare = map[string]int{}
	}
	s.spare[group+"/"+placement] = spare
}

func (s *placementSpares) get(group, placement string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.spare[group+"/"+placement]
	return v, ok
}

// topologyKeyOf returns the topology constraint key of an upstream group
// or composite.
func topologyKeyOf(pg fwk.PodGroupInfo) string {
	if g := pg.GetPodGroup(); g != nil && g.Spec.SchedulingConstraints != nil && len(g.Spec.SchedulingConstraints.Topology) > 0 {
		return g.Spec.SchedulingConstraints.Topology[0].Key
	}
	if c := pg.GetCompositePodGroup(); c != nil && c.Spec.SchedulingConstraints != nil && len(c.Spec.SchedulingConstraints.Topology) > 0 {
		return c.Spec.SchedulingConstraints.Topology[0].Key
	}
	return ""
}

// GeneratePlacements implements fwk.PlacementGeneratePlugin: the domains
// of the group's topology key inside the parent placement (only the
// domain of members already bound, if any) where the group fits, tightest
// first. If it fits nowhere, every domain is proposed, so that the
// scheduler reports per pod why.
func (p *Plugin) GeneratePlacements(ctx context.Context, _ fwk.PodGroupCycleState, pg fwk.PodGroupInfo, parent *fwk.Placement) (*fwk.GeneratePlacementsResult, *fwk.Status) {
	key := topologyKeyOf(pg)
	if key == "" {
		return &fwk.GeneratePlacementsResult{Placements: []*fwk.Placement{parent}}, nil
	}
	required := p.boundDomain(pg, key)
	byDomain := map[string][]fwk.NodeInfo{}
	for _, ni := range parent.Nodes {
		if v, ok := ni.Node().Labels[key]; ok && (required == "" || v == required) {
			byDomain[v] = append(byDomain[v], ni)
		}
	}
	type candidate struct {
		placement *fwk.Placement
		spare     int
	}
	var all, fit []candidate
	for _, domain := range slices.Sorted(maps.Keys(byDomain)) {
		c := candidate{placement: &fwk.Placement{Name: domain, Nodes: byDomain[domain]}}
		spare, ok, err := p.groupFits(ctx, pg, c.placement.Nodes)
		if err != nil {
			return nil, fwk.AsStatus(err)
		}
		c.spare = spare
		all = append(all, c)
		if ok {
			fit = append(fit, c)
			p.spares.set(pg.GetKey(), domain, spare)
		}
	}
	klog.FromContext(ctx).V(4).Info("Placements proposed", "podGroup", pg.GetKey(), "key", key, "fit", len(fit), "domains", len(all))
	if len(fit) == 0 {
		fit = all
	}
	sort.SliceStable(fit, func(i, j int) bool { return fit[i].spare < fit[j].spare })
	out := make([]*fwk.Placement, len(fit))
	for i, c := range fit {
		out[i] = c.placement
	}
	return &fwk.GeneratePlacementsResult{Placements: out}, nil
}

// groupFits reports whether a group's unscheduled pods fit on nodes, and
// how much room is left. A leaf group is measured by the capacity of its
// first unscheduled pod on each node. A composite fits if its children,
// taken largest first, each fit in one domain of their own key (or
// anywhere, without one) in the room the children before them left: each
// child takes the tightest domain that holds it, and the pods it places
// there count against the nodes for the next.
func (p *Plugin) groupFits(ctx context.Context, pg fwk.PodGroupInfo, nodes []fwk.NodeInfo) (int, bool, error) {
	return p.fitIn(ctx, pg, nodes, map[string]int{})
}

func (p *Plugin) fitIn(ctx context.Context, pg fwk.PodGroupInfo, nodes []fwk.NodeInfo, used map[string]int) (int, bool, error) {
	children := pg.GetChildren()
	if len(children) == 0 {
		capacity, err := p.leafCapacity(ctx, pg, nodes, used)
		if err != nil {
			return 0, false, err
		}
		want := len(pg.GetUnscheduledPods())
		total := 0
		for _, c := range capacity {
			total += c
		}
		if total < want {
			return total - want, false, nil
		}
		fill(capacity, want, used)
		return total - want, true, nil
	}
	children = slices.Clone(children)
	sort.SliceStable(children, func(i, j int) bool { return podsBelow(children[i]) > podsBelow(children[j]) })
	spare := 0
	for _, child := range children {
		best, bestSpare := -1, 0
		subs := splitByKey(nodes, topologyKeyOf(child))
		for i, sub := range subs {
			trial := maps.Clone(used)
			s, ok, err := p.fitIn(ctx, child, sub, trial)
			if err != nil {
				return 0, false, err
			}
			if ok && (best < 0 || s < bestSpare) {
				best, bestSpare = i, s
			}
		}
		if best < 0 {
			return spare, false, nil
		}
		if _, _, err := p.fitIn(ctx, child, subs[best], used); err != nil {
			return 0, false, err
		}
		spare += bestSpare
	}
	return spare, true, nil
}

// leafCapacity is how many more of a leaf group's pods each node takes,
// less the pods siblings were already fitted there.
func (p *Plugin) leafCapacity(ctx context.Context, pg fwk.PodGroupInfo, nodes []fwk.NodeInfo, used map[string]int) (map[string]int, error) {
	pods := pg.GetUnscheduledPods()
	if len(pods) == 0 {
		return map[string]int{}, nil
	}
	capacity, _, err := p.capacity.capacities(ctx, pods[0], len(pods), nodes, nil)
	if err != nil {
		return nil, err
	}
	for n := range capacity {
		capacity[n] = max(capacity[n]-used[n], 0)
	}
	klog.FromContext(ctx).V(5).Info("Group capacity", "podGroup", pg.GetKey(), "pods", len(pods), "nodes", len(nodes), "capacity", capacity)
	return capacity, nil
}

// fill places want pods on the nodes with the most room first and records
// them in used.
func fill(capacity map[string]int, want int, used map[string]int) {
	names := slices.Sorted(maps.Keys(capacity))
	sort.SliceStable(names, func(i, j int) bool { return capacity[names[i]] > capacity[names[j]] })
	for _, n := range names {
		take := min(capacity[n], want)
		used[n] += take
		if want -= take; want == 0 {
			return
		}
	}
}

// podsBelow counts the unscheduled pods of a group and its descendants.
func podsBelow(pg fwk.PodGroupInfo) int {
	n := len(pg.GetUnscheduledPods())
	for _, c := range pg.GetChildren() {
		n += podsBelow(c)
	}
	return n
}

// splitByKey groups nodes by a label; without a key they are one group.
func splitByKey(nodes []fwk.NodeInfo, key string) [][]fwk.NodeInfo {
	if key == "" {
		return [][]fwk.NodeInfo{nodes}
	}
	by := map[string][]fwk.NodeInfo{}
	for _, ni := range nodes {
		if v, ok := ni.Node().Labels[key]; ok {
			by[v] = append(by[v], ni)
		}
	}
	out := make([][]fwk.NodeInfo, 0, len(by))
	for _, v := range slices.Sorted(maps.Keys(by)) {
		out = append(out, by[v])
	}
	return out
}

// boundDomain is the domain of key that the group's bound members (of
// every group below a composite) already occupy, or "".
func (p *Plugin) boundDomain(pg fwk.PodGroupInfo, key string) string {
	var groups []string
	var walk func(fwk.PodGroupInfo)
	walk = func(g fwk.PodGroupInfo) {
		if g.GetPodGroup() != nil {
			groups = append(groups, g.GetNamespace()+"/"+g.GetName())
		}
		for _, c := range g.GetChildren() {
			walk(c)
		}
	}
	walk(pg)
	for _, g := range groups {
		for _, m := range p.members(g) {
			if m.Spec.NodeName == "" {
				continue
			}
			if ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(m.Spec.NodeName); err == nil && ni.Node() != nil {
				if v, ok := ni.Node().Labels[key]; ok {
					return v
				}
			}
		}
	}
	return ""
}

// ScorePlacement implements fwk.PlacementScorePlugin: the less room a
// placement leaves, the higher it scores, so the group takes the
// tightest domain and keeps larger ones whole for larger groups.
func (p *Plugin) ScorePlacement(_ context.Context, _ fwk.PlacementCycleState, pg fwk.PodGroupInfo, a *fwk.PodGroupAssignments) (int64, *fwk.Status) {
	if a == nil || a.Placement == nil {
		return 0, nil
	}
	spare, ok := p.spares.get(pg.GetKey(), a.Placement.Name)
	if !ok {
		return 0, nil
	}
	return -int64(spare), nil
}

// PlacementScoreExtensions implements fwk.PlacementScorePlugin.
func (p *Plugin) PlacementScoreExtensions() fwk.PlacementScoreExtensions { return p }

// NormalizePlacementScore implements fwk.PlacementScoreExtensions: scores
// are mapped onto [0, MaxNodeScore], the tightest placement highest.
func (p *Plugin) NormalizePlacementScore(_ context.Context, _ fwk.PodGroupCycleState, _ fwk.PodGroupInfo, scores []fwk.PlacementScore) *fwk.Status {
	if len(scores) == 0 {
		return nil
	}
	lo, hi := scores[0].Score, scores[0].Score
	for _, s := range scores {
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		if hi == lo {
			scores[i].Score = fwk.MaxNodeScore
		} else {
			scores[i].Score = (scores[i].Score - lo) * fwk.MaxNodeScore / (hi - lo)
		}
	}
	return nil
}
