package gang

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
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
// proposed placement leaves, for ScorePlacement, which the scheduler
// calls in the same pod-group cycle. Entries live two generations of
// sparesPerGeneration groups, so that the groups the scheduler has
// finished with are forgotten.
type placementSpares struct {
	mu            sync.Mutex
	spare, before map[string]int // group key + "/" + placement name
	groups        map[string]bool
}

// sparesPerGeneration is how many groups' proposals make a generation.
const sparesPerGeneration = 1024

func (s *placementSpares) set(group, placement string, spare int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == nil || (!s.groups[group] && len(s.groups) >= sparesPerGeneration) {
		s.before, s.spare, s.groups = s.spare, map[string]int{}, map[string]bool{}
	}
	s.groups[group] = true
	s.spare[group+"/"+placement] = spare
}

func (s *placementSpares) get(group, placement string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := group + "/" + placement
	if v, ok := s.spare[key]; ok {
		return v, true
	}
	v, ok := s.before[key]
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
	// Per-node capacity of every leaf group, once over the parent's
	// nodes; each domain below only adds it up.
	caps := map[string]map[string]int{}
	if err := p.leafCapacities(ctx, pg, parent.Nodes, caps); err != nil {
		return nil, fwk.AsStatus(err)
	}
	required := p.boundDomain(pg, key)
	type candidate struct {
		placement *fwk.Placement
		spare     int
	}
	var all, fit []candidate
	names, groups := groupByLabel(parent.Nodes, key)
	for i, domain := range names {
		if required != "" && domain != required {
			continue
		}
		c := candidate{placement: &fwk.Placement{Name: domain, Nodes: groups[i]}}
		spare, ok := fitIn(pg, groups[i], map[string]int{}, caps)
		c.spare = spare
		all = append(all, c)
		if ok {
			fit = append(fit, c)
		}
	}
	fits := len(fit) > 0
	if !fits {
		fit = all
	}
	sort.SliceStable(fit, func(i, j int) bool { return fit[i].spare < fit[j].spare })
	if fits && len(fit) > maxProposals && countedExactly(pg) && !triedBefore(pg) {
		fit = fit[:maxProposals]
	}
	group := pg.GetKey()
	klog.FromContext(ctx).V(4).Info("Placements proposed", "podGroup", group, "key", key, "proposed", len(fit), "fit", fits, "domains", len(all))
	out := make([]*fwk.Placement, len(fit))
	for i, c := range fit {
		out[i] = c.placement
		if fits {
			p.spares.set(group, c.placement.Name, c.spare)
		}
	}
	return &fwk.GeneratePlacementsResult{Placements: out}, nil
}

// maxProposals is how many of the domains where a group fits StrataGang
// proposes, the tightest ones, when it can count the group's fit
// exactly. The scheduler tries a group in full in every proposed
// placement (Filter and Score for each member on the domain's nodes)
// before it picks one, so on 50 racks where a small group fits
// everywhere, proposing them all costs 50 trials for one group; the
// tightest domains are those StrataGang's placement score prefers anyway.
//
// Every fitting domain is proposed instead when the count is an
// estimate: members with inter-pod (anti-)affinity, topology spread,
// volumes or host ports, which a Filter plugin can turn away where the
// capacity says there is room; or a group that comes back after an
// attempt failed (another plugin of the profile said no).
const maxProposals = 4

// countedExactly reports whether the capacity estimate is exact for
// every unscheduled pod of the group (and of the groups below it): none
// has constraints that only the Filter plugins check.
func countedExactly(pg fwk.PodGroupInfo) bool { return !anyPod(pg, selfInteracting) }

// triedBefore reports whether the scheduler already failed to place a
// pod of the group (or of a group below a composite): the pod carries
// PodScheduled=False.
func triedBefore(pg fwk.PodGroupInfo) bool {
	return anyPod(pg, func(pod *corev1.Pod) bool {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return true
			}
		}
		return false
	})
}

// anyPod reports whether f holds for an unscheduled pod of the group or
// of a group below it.
func anyPod(pg fwk.PodGroupInfo, f func(*corev1.Pod) bool) bool {
	if slices.ContainsFunc(pg.GetUnscheduledPods(), f) {
		return true
	}
	return slices.ContainsFunc(pg.GetChildren(), func(c fwk.PodGroupInfo) bool { return anyPod(c, f) })
}

// leafCapacities records, for every leaf group under pg, how many more of
// its pods each node takes. A leaf is usually one pod template; where its
// pods differ in shape, a node takes as many as the most demanding shape
// allows there (conservative: the group cycle itself places the pods).
func (p *Plugin) leafCapacities(ctx context.Context, pg fwk.PodGroupInfo, nodes []fwk.NodeInfo, caps map[string]map[string]int) error {
	if children := pg.GetChildren(); len(children) > 0 {
		for _, c := range children {
			if err := p.leafCapacities(ctx, c, nodes, caps); err != nil {
				return err
			}
		}
		return nil
	}
	pods := pg.GetUnscheduledPods()
	if len(pods) == 0 {
		caps[pg.GetKey()] = map[string]int{}
		return nil
	}
	var capacity map[string]int
	seen := map[string]bool{}
	for _, pod := range pods {
		key := shapeKey(pod)
		if seen[key] {
			continue
		}
		seen[key] = true
		c, _, err := p.capacity.capacities(ctx, pod, len(pods), nodes, nil, nil)
		if err != nil {
			return err
		}
		if capacity == nil {
			capacity = c
			continue
		}
		for n, k := range capacity {
			capacity[n] = min(k, c[n])
		}
	}
	klog.FromContext(ctx).V(5).Info("Group capacity", "podGroup", pg.GetKey(), "pods", len(pods), "nodes", len(nodes), "capacity", capacity)
	caps[pg.GetKey()] = capacity
	return nil
}

// fitIn reports whether a group's unscheduled pods fit on nodes, and how
// much room is left. A leaf group fits by its capacity on the nodes less
// the pods already fitted there (used). A composite fits if its children,
// taken largest first, each fit in one domain of their own key (or
// anywhere, without one) in the room the children before them left: each
// child takes the tightest domain that holds it, and the pods it places
// there count against the nodes for the next. used is updated with the
// pods placed when the group fits.
func fitIn(pg fwk.PodGroupInfo, nodes []fwk.NodeInfo, used map[string]int, caps map[string]map[string]int) (int, bool) {
	children := pg.GetChildren()
	if len(children) == 0 {
		capacity := make(map[string]int, len(nodes))
		total := 0
		leaf := caps[pg.GetKey()]
		for _, ni := range nodes {
			n := ni.Node().Name
			c := max(leaf[n]-used[n], 0)
			capacity[n] = c
			total += c
		}
		want := len(pg.GetUnscheduledPods())
		if total < want {
			return total - want, false
		}
		fill(capacity, want, used)
		return total - want, true
	}
	children = slices.Clone(children)
	sort.SliceStable(children, func(i, j int) bool { return podsBelow(children[i]) > podsBelow(children[j]) })
	spare := 0
	for _, child := range children {
		var best map[string]int
		bestSpare := 0
		_, subs := groupByLabel(nodes, topologyKeyOf(child))
		for _, sub := range subs {
			trial := maps.Clone(used)
			if s, ok := fitIn(child, sub, trial, caps); ok && (best == nil || s < bestSpare) {
				best, bestSpare = trial, s
			}
		}
		if best == nil {
			return spare, false
		}
		maps.Copy(used, best)
		spare += bestSpare
	}
	return spare, true
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

// groupByLabel splits nodes by the value of a label, in value order;
// nodes without it are left out. Without a key the nodes are one group.
func groupByLabel(nodes []fwk.NodeInfo, key string) ([]string, [][]fwk.NodeInfo) {
	if key == "" {
		return []string{""}, [][]fwk.NodeInfo{nodes}
	}
	by := map[string][]fwk.NodeInfo{}
	for _, ni := range nodes {
		if v, ok := ni.Node().Labels[key]; ok {
			by[v] = append(by[v], ni)
		}
	}
	names := slices.Sorted(maps.Keys(by))
	groups := make([][]fwk.NodeInfo, len(names))
	for i, v := range names {
		groups[i] = by[v]
	}
	return names, groups
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
