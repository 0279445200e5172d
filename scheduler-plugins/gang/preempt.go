package gang

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/scheduler-plugins/gang/internal/jobpreempt"
	"github.com/strata-sh/strata/scheduler-plugins/topology"
)

// Job-level preemption, the gang plugin's side: planning the gang with
// victims evicted is the plugin's (shapes, capacities, topology); the
// victims, the bound, the evictions, the nominations and their API
// writes are package jobpreempt's, which reaches back through jobHost.

// AnnotationPreemptible set to "false" on a pod keeps it from ever being a
// victim of job-level preemption.
const AnnotationPreemptible = AnnotationPrefix + "preemptible"

// newPreemptor returns the plugin's job-level preemption state; its
// nominated nodes are written once its Run runs.
func newPreemptor(p *Plugin) *jobpreempt.Preemptor {
	return jobpreempt.New(jobpreempt.Config{Host: jobHost{p}, Pods: p.pods, PDBs: p.pdbLister,
		Plugin: Name, Preemptible: AnnotationPreemptible})
}

// jobHost lends job-level preemption what it needs of the plugin. None
// of its methods takes the plugin's lock but Retry.
type jobHost struct{ p *Plugin }

func (h jobHost) Members(gang string) []*corev1.Pod     { return h.p.members(gang) }
func (h jobHost) GangOf(pod *corev1.Pod) string         { return gangKeyOf(pod) }
func (h jobHost) Snapshot() fwk.SharedLister            { return h.p.handle.SnapshotSharedLister() }
func (h jobHost) Client() kubernetes.Interface          { return h.p.handle.ClientSet() }
func (h jobHost) Retry(logger klog.Logger, gang string) { h.p.retryGang(logger, gang) }
func (h jobHost) Claims() fwk.ResourceClaimTracker {
	return h.p.handle.SharedDRAManager().ResourceClaims()
}

// preempt makes room for a whole gang by evicting lower-priority jobs, or
// evicts nothing. See README.md. It makes no API write: evictions and
// nominated nodes are written in the background.
func (p *Plugin) preempt(ctx context.Context, pod *corev1.Pod, g *gangSpec) (*fwk.PostFilterResult, *fwk.Status) {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("%s; preemptionPolicy is Never, so nothing was evicted", p.lastFailure(g.key).msg))
	}
	nominated, st := p.preemptFor(ctx, pod, g, []*corev1.Pod{pod})
	if !st.IsSuccess() {
		return nil, st
	}
	return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: nominated[pod.UID], NominatingMode: fwk.ModeOverride}}, st
}

// preemptFor is preempt once the gang may preempt at all, for pod, the
// member being scheduled. The scheduler writes the nominated nodes of
// the members in cycle itself (the pods of its scheduling cycle): they
// are returned by UID. Those of the gang's other pending members are
// written in the background.
func (p *Plugin) preemptFor(ctx context.Context, pod *corev1.Pod, g *gangSpec, cycle []*corev1.Pod) (map[types.UID]string, *fwk.Status) {
	logger := klog.FromContext(ctx)
	if f := p.lastFailure(g.key); f.final {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, f.msg)
	}
	if msg := p.jobs.Pending(ctx, g.key); msg != "" {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	nodes, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	prio := corev1helpers.PodPriority(pod)
	shapes, placed := p.gangShapes(g, pod)
	units := p.jobs.Units(nodes, prio, p.jobOf())
	base, err := p.handle.SharedDRAManager().ResourceClaims().GatherAllocatedState()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	tree, err := p.treeFor(g, nodes)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	probes := p.probesFor(ctx, shapes)
	blocked := p.reservedNodes(prio, g.key)
	place := func(set []int) (*placement, error) {
		return p.place(ctx, g, shapes, placed, nodes, tree, p.adjustFor(units, set, base), probes, blocked)
	}
	bound := p.roomBound(ctx, shapes, nodes, units, base, probes[shapes[0].key], blocked)
	set, cost, ok, err := jobpreempt.Search(units, bound, func(set []int) (bool, error) {
		_, err := place(set)
		var tf *topology.Failure
		if errors.As(err, &tf) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if !ok {
		why := p.lastFailure(g.key).msg
		if len(units) == 0 {
			// Nothing to preempt: the placement failure says it all.
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
		}
		msg := fmt.Sprintf("%s; evicting all %d lower-priority jobs would not make room either, so nothing was evicted", why, len(units))
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	if len(set) == 0 {
		// Room exists without evicting anyone; the gang is retried whole.
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("gang %s could not be placed whole; retrying without preemption", g.key))
	}
	plan, err := place(set)
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("plan after choosing victims: %w", err))
	}
	logger.V(1).Info("Preempting for gang", "gang", g.key, "victims", cost.String(), "where", plan.domain)
	nom := jobpreempt.NewNomination(prio, plan.nodes())
	var names []string
	var evict []*corev1.Pod
	for _, i := range set {
		names = append(names, units[i].ID)
		for _, v := range units[i].Victims {
			p.jobs.AddVictim(nom, v)
			// A victim still waiting in Permit holds room only in the
			// scheduler: rejecting it frees the room, and the pod, never
			// bound, goes back to the queue instead of being deleted.
			if wp := p.handle.GetWaitingPod(v.UID); wp != nil {
				wp.Reject(Name, fmt.Sprintf("preempted to make room for gang %s", g.key))
				continue
			}
			evict = append(evict, v)
		}
	}
	observeVictims(cost.Pods, len(set))
	mine, others := p.assignNominations(g, plan.byShape, cycle)
	// The nomination keeps other pods off the room from now on; the API
	// writes do not hold up the scheduling loop.
	p.jobs.Begin(ctx, g.key, nom, evict, others, nil, "")
	nominated := make(map[types.UID]string, len(mine))
	for m, node := range mine {
		p.jobs.Supersede(m, node)
		nominated[m.UID] = node
	}
	p.announcePreempted(g, fmt.Sprintf("evicting %s: %s", cost.String(), strings.Join(names, ", ")))
	return nominated, fwk.NewStatus(fwk.Success)
}

// jobOf returns how victims are grouped into jobs: a gang with all its
// pods, or a lone pod (""). Upstream pod groups are evicted as their
// disruptionMode says: pod by pod (Single) or whole, up to the highest
// group with mode All. Each gang is looked up once per search.
func (p *Plugin) jobOf() func(*corev1.Pod) string {
	unitOf := map[string]string{} // gang key -> job, "" for pod by pod
	return func(v *corev1.Pod) string {
		gk := gangKeyOf(v)
		if gk == "" {
			return ""
		}
		unit, ok := unitOf[gk]
		if !ok {
			g := p.specByKey(gk, v)
			unit = "gang " + gk
			if g.upstream {
				unit = ""
				if g.victimKey != "" {
					unit = "gang " + g.victimKey
				}
			}
			unitOf[gk] = unit
		}
		return unit
	}
}

// retryGang sends a gang's pending members round again, its last failure
// no answer for them (fail-fast would otherwise stop them before
// PostFilter, where a preemption in flight moves on).
func (p *Plugin) retryGang(logger klog.Logger, key string) {
	p.mu.Lock()
	if f, ok := p.failures[key]; ok {
		f.at = time.Time{}
		p.failures[key] = f
	}
	p.mu.Unlock()
	p.activateMembers(logger, key)
}

// adjustFor simulates evicting the units of set: their requests and pod
// slots come back, and the devices of claims only they use are freed.
func (p *Plugin) adjustFor(units []jobpreempt.Unit, set []int, base *structured.AllocatedState) *adjustment {
	adj := &adjustment{freed: map[string]corev1.ResourceList{}, freedPods: map[string]int{}}
	victims := map[types.UID]bool{}
	for _, i := range set {
		for _, v := range units[i].Victims {
			victims[v.UID] = true
		}
	}
	state := cloneAllocated(base)
	for _, i := range set {
		for _, v := range units[i].Victims {
			node := v.Spec.NodeName
			req := resourcehelper.PodRequests(v, resourcehelper.PodResourcesOptions{})
			sum := adj.freed[node]
			if sum == nil {
				sum = corev1.ResourceList{}
			}
			for name, q := range req {
				cur := sum[name]
				cur.Add(q)
				sum[name] = cur
			}
			adj.freed[node] = sum
			adj.freedPods[node]++
			for _, c := range p.jobs.FreedClaims(v, victims) {
				applyAllocation(state, c.Status.Allocation.Devices.Results, false)
			}
		}
	}
	adj.allocated = state
	return adj
}

// roomBound returns the bound the victim search asks before simulating a
// set (see jobpreempt.RoomBound), from the scarcest shape's capacity
// without evictions and with every unit evicted; nil where no bound
// holds or cannot be computed.
func (p *Plugin) roomBound(ctx context.Context, shapes []*shape, nodes []fwk.NodeInfo, units []jobpreempt.Unit, allocated *structured.AllocatedState, probe *filterProbe, blocked sets.Set[string]) *jobpreempt.RoomBound {
	if len(shapes) == 0 || len(units) == 0 || !p.jobs.Bounded(units) {
		return nil
	}
	every := make([]int, len(units))
	for i := range units {
		every[i] = i
	}
	s := shapes[0]
	base, _, err := p.capacity.capacities(ctx, s.pod, s.pending, nodes, p.adjustFor(units, nil, allocated), probe)
	if err != nil {
		return nil
	}
	all, _, err := p.capacity.capacities(ctx, s.pod, s.pending, nodes, p.adjustFor(units, every, allocated), probe)
	if err != nil {
		return nil
	}
	return jobpreempt.NewRoomBound(s.pending, units, base, all, blocked)
}

// assignNominations gives every pending member a node of its shape's
// plan (members in name order onto nodes in name order): the nodes of
// the members in cycle, which the scheduler writes, and the others' to
// write.
func (p *Plugin) assignNominations(g *gangSpec, byShape map[string]map[string]int, cycle []*corev1.Pod) (map[*corev1.Pod]string, map[*corev1.Pod]string) {
	slots := map[string][]string{}
	for shape, nodes := range byShape {
		for _, n := range sortedNodes(nodes) {
			for i := 0; i < nodes[n]; i++ {
				slots[shape] = append(slots[shape], n)
			}
		}
	}
	var members []*corev1.Pod
	for _, m := range p.members(g.key) {
		if m.Spec.NodeName == "" {
			members = append(members, m)
		}
	}
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	inCycle := sets.New[types.UID]()
	for _, c := range cycle {
		inCycle.Insert(c.UID)
	}
	mine, others := map[*corev1.Pod]string{}, map[*corev1.Pod]string{}
	for _, m := range members {
		shape := p.shapeOf(m)
		if len(slots[shape]) == 0 {
			continue
		}
		node := slots[shape][0]
		slots[shape] = slots[shape][1:]
		if inCycle.Has(m.UID) {
			mine[m] = node
		} else {
			others[m] = node
		}
	}
	return mine, others
}

// reservedNodes lists the nodes whose freed room is nominated to other
// gangs and reserved against priority prio: a plan must not count it.
func (p *Plugin) reservedNodes(prio int32, gang string) sets.Set[string] {
	return p.jobs.ReservedNodes(prio, gang)
}

// reservedFor tells whether a node holds room nominated to another gang
// and reserved against priority prio, and which gang.
func (p *Plugin) reservedFor(node string, prio int32, gang string) string {
	return p.jobs.ReservedFor(node, prio, gang)
}

// clearNomination drops a gang's reservation (it was placed, or it can no
// longer be).
func (p *Plugin) clearNomination(key string) { p.jobs.Clear(key) }

// hasNominations reports whether any gang holds reserved room.
func (p *Plugin) hasNominations() bool { return p.jobs.Any() }

// failure is why a gang's last plan failed; final when no eviction can
// help (a rule naming a layer the cluster lacks).
type failure struct {
	msg   string
	final bool
	// gen and at are the snapshot and time of the failed plan; outcome is
	// what PostFilter answered for it, reused by members that fail fast.
	gen     [3]int64
	at      time.Time
	outcome *fwk.Status
}

// lastFailure returns why the gang's last plan failed.
func (p *Plugin) lastFailure(key string) failure {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.failures[key]; ok {
		return f
	}
	return failure{msg: fmt.Sprintf("gang %s could not be placed whole", key)}
}
