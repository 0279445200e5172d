package gang

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/scheduler-plugins/preemption"
	"github.com/strata-sh/strata/scheduler-plugins/topology"
)

// AnnotationPreemptible set to "false" on a pod keeps it from ever being a
// victim of job-level preemption.
const AnnotationPreemptible = AnnotationPrefix + "preemptible"

// nominationTTL bounds how long freed room stays reserved for a gang that
// does not come to use it.
const nominationTTL = 5 * time.Minute

// evictTries bounds how often the eviction of one victim is tried (an
// admission webhook or RBAC refusing the delete, the API server
// unreachable) before the gang gives its room up; evictRetryAfter spaces
// the tries.
const (
	evictTries      = 3
	evictRetryAfter = 5 * time.Second
	// evictTimeout bounds the API writes of one round of evictions.
	evictTimeout = 30 * time.Second
)

// eviction is where the eviction of one victim stands.
type eviction struct {
	tries    int
	inFlight bool
	at       time.Time // when the last try ended
	err      error     // why the last try failed; nil if it did not
}

// nomination is a preemption in flight for one gang.
type nomination struct {
	victims map[types.UID]types.NamespacedName
	// victimNodes are the nodes the victims ran on.
	victimNodes map[types.UID]string
	// claims are the victims' allocated claims: the room is not free
	// until they are deallocated.
	claims   map[types.NamespacedName]bool
	nodes    map[string]int
	priority int32
	at       time.Time
	// freed: the victims were seen gone and their claims released, and
	// the gang was sent to try again on that room.
	freed bool
	// spent: the victims are gone but the gang still did not fit, or
	// some could not be evicted; why says which.
	spent bool
	why   string
	// evictions are the API deletes of the victims this scheduler made.
	evictions map[types.UID]*eviction
}

func newNomination(prio int32) *nomination {
	return &nomination{victims: map[types.UID]types.NamespacedName{}, victimNodes: map[types.UID]string{},
		claims: map[types.NamespacedName]bool{}, nodes: map[string]int{}, priority: prio, at: time.Now(),
		evictions: map[types.UID]*eviction{}}
}

// addVictim records a pod evicted for the nomination, and its allocated
// claims, whose devices are not free until they are deallocated.
func (p *Plugin) addVictim(nom *nomination, v *corev1.Pod) {
	nom.victims[v.UID] = types.NamespacedName{Namespace: v.Namespace, Name: v.Name}
	nom.victimNodes[v.UID] = v.Spec.NodeName
	for _, c := range p.claimsOf(v) {
		if c.Status.Allocation != nil {
			nom.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = true
		}
	}
}

// inSnapshot reports whether the scheduler's snapshot still has the pod
// on the node.
func (p *Plugin) inSnapshot(uid types.UID, node string) bool {
	if node == "" {
		return false
	}
	ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(node)
	if err != nil || ni == nil {
		return false
	}
	for _, pi := range ni.GetPods() {
		if pi.GetPod().UID == uid {
			return true
		}
	}
	return false
}

// victimUnit is one job that may be evicted.
type victimUnit struct {
	preemption.Unit
	pods []*corev1.Pod
}

// preempt makes room for a whole gang by evicting lower-priority jobs, or
// evicts nothing. See README.md.
func (p *Plugin) preempt(ctx context.Context, pod *corev1.Pod, g *gangSpec) (*fwk.PostFilterResult, *fwk.Status) {
	logger := klog.FromContext(ctx)
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("%s; preemptionPolicy is Never, so nothing was evicted", p.lastFailure(g.key).msg))
	}
	if f := p.lastFailure(g.key); f.final {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, f.msg)
	}
	if msg := p.earlierPreemptionPending(ctx, g); msg != "" {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	nodes, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	prio := corev1helpers.PodPriority(pod)
	shapes, placed := p.gangShapes(g, pod)
	units := p.victimUnits(nodes, prio)
	base, err := p.handle.SharedDRAManager().ResourceClaims().GatherAllocatedState()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	tree, err := p.tree(nodes)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	probes := p.probesFor(ctx, shapes)
	blocked := p.reservedNodes(prio, g.key)
	place := func(set []int) (*placement, error) {
		return p.place(ctx, g, shapes, placed, nodes, tree, p.adjustFor(units, set, base), probes, blocked)
	}
	plain := make([]preemption.Unit, len(units))
	for i, u := range units {
		plain[i] = u.Unit
	}
	bound := p.roomBound(ctx, shapes, nodes, units, base, probes[shapes[0].key], blocked)
	set, ok, err := preemption.Choose(plain, func(set []int) (bool, error) {
		if bound != nil && !bound.enough(set) {
			return false, nil
		}
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
	cost := preemption.CostOf(plain, set)
	logger.V(1).Info("Preempting for gang", "gang", g.key, "victims", cost.String(), "where", plan.domain)
	nom := newNomination(prio)
	nom.nodes = plan.nodes()
	var names []string
	var victims []*corev1.Pod
	for _, i := range set {
		names = append(names, units[i].ID)
		for _, v := range units[i].pods {
			p.addVictim(nom, v)
			// A victim still waiting in Permit holds room only in the
			// scheduler: rejecting it frees the room, and the pod, never
			// bound, goes back to the queue instead of being deleted.
			if wp := p.handle.GetWaitingPod(v.UID); wp != nil {
				wp.Reject(Name, fmt.Sprintf("preempted to make room for gang %s", g.key))
				continue
			}
			victims = append(victims, v)
		}
	}
	observeVictims(len(nom.victims), len(set))
	p.mu.Lock()
	p.nominations[g.key] = nom
	p.mu.Unlock()
	mine, others := p.assignNominations(g, plan.byShape, pod)
	// The API writes do not hold up the scheduling loop: the nomination
	// above already keeps other pods off the room.
	writes := context.WithoutCancel(ctx)
	p.startEvictions(nom, victims)
	go p.evictVictims(writes, g.key, nom, victims)
	go p.nominate(writes, others)
	p.status.preempted(g, fmt.Sprintf("evicting %s: %s", cost.String(), strings.Join(names, ", ")))
	return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: mine, NominatingMode: fwk.ModeOverride}}, fwk.NewStatus(fwk.Success)
}

// earlierPreemptionPending keeps a gang from evicting a second round
// while victims of the first are still terminating, and from evicting
// again right after the room it made could not be used: then its
// nominations are cleared and it backs off for nominationTTL.
func (p *Plugin) earlierPreemptionPending(ctx context.Context, g *gangSpec) string {
	p.mu.Lock()
	nom := p.nominations[g.key]
	p.mu.Unlock()
	if nom == nil {
		return ""
	}
	// A victim whose eviction failed is still bound and holds its room:
	// evict it again, and after evictTries give the room up, naming it.
	// Those held back with it are not victims any more either.
	fe := p.failedEvictions(nom)
	if len(fe.stuck) > 0 {
		why := fmt.Sprintf("could not evict %s after %d tries", strings.Join(fe.stuck, ", "), evictTries)
		p.giveRoomBack(ctx, g, nom, fe.notEvicted, why)
		return fmt.Sprintf("gang %s: %s; nominations cleared, nothing more evicted before %s", g.key, why, nom.at.Add(nominationTTL).Format(time.RFC3339))
	}
	if len(fe.again) > 0 {
		p.startEvictions(nom, fe.again)
		go p.evictVictims(context.WithoutCancel(ctx), g.key, nom, fe.again)
		names := make([]string, len(fe.again))
		for i, v := range fe.again {
			names[i] = v.Namespace + "/" + v.Name
		}
		return fmt.Sprintf("gang %s: evicting %s again, the last try failed", g.key, strings.Join(names, ", "))
	}
	if len(fe.waiting) > 0 {
		return fmt.Sprintf("gang %s: could not evict %s; trying again at %s", g.key, strings.Join(fe.waiting, ", "), fe.next.Format(time.RFC3339))
	}
	left := 0
	for uid, name := range nom.victims {
		// The pod lister can show a victim gone before the scheduler's
		// snapshot, which plans read, has let go of its room.
		// A victim that was waiting in Permit was rejected, not deleted:
		// it is back in the queue, with no room held.
		if v, err := p.pods.Pods(name.Namespace).Get(name.Name); (err == nil && v.UID == uid && v.DeletionTimestamp != nil) || p.inSnapshot(uid, nom.victimNodes[uid]) {
			left++
		}
	}
	if left > 0 {
		return fmt.Sprintf("gang %s: waiting for %s evicted for it to terminate", g.key, plural(left, "pod"))
	}
	held, err := p.heldForVictims(nom)
	if err != nil {
		return fmt.Sprintf("gang %s: cannot tell whether the claims of evicted pods are deallocated: %v", g.key, err)
	}
	if held > 0 {
		return fmt.Sprintf("gang %s: waiting for %s of evicted pods to be deallocated", g.key, plural(held, "ResourceClaim"))
	}
	if nom.spent {
		if time.Since(nom.at) < nominationTTL {
			return fmt.Sprintf("gang %s: %s; not evicting again before %s", g.key, nom.why, nom.at.Add(nominationTTL).Format(time.RFC3339))
		}
		p.clearNomination(g.key)
		return ""
	}
	if !nom.freed {
		// The plan that just failed may have read the claims before the
		// victims' were released: one more try, on a plan computed from
		// now, before deciding that the room cannot be used.
		p.mu.Lock()
		nom.freed = true
		p.mu.Unlock()
		p.retryGang(klog.FromContext(ctx), g.key)
		return fmt.Sprintf("gang %s: the pods evicted for it are gone; trying again in the room they left", g.key)
	}
	// The victims are gone and the gang still does not fit: give the room
	// back, evict nothing more for now.
	p.giveRoomBack(ctx, g, nom, nil, "the room an earlier preemption made could not be used")
	return fmt.Sprintf("gang %s: %s; nominations cleared, nothing more evicted", g.key, nom.why)
}

// giveRoomBack ends a nomination that cannot be used: its room is no
// longer reserved, the members' nominated nodes are cleared, and the gang
// evicts nothing more for nominationTTL, saying why. Victims in keep were
// never evicted: they are no longer victims, and nothing waits for them.
func (p *Plugin) giveRoomBack(ctx context.Context, g *gangSpec, nom *nomination, keep []types.UID, why string) {
	p.mu.Lock()
	nom.spent, nom.at, nom.nodes, nom.why = true, time.Now(), nil, why
	for _, uid := range keep {
		delete(nom.victims, uid)
		delete(nom.victimNodes, uid)
		delete(nom.evictions, uid)
	}
	p.mu.Unlock()
	for _, m := range p.members(g.key) {
		if m.Spec.NodeName == "" && m.Status.NominatedNodeName != "" {
			patch := []byte(`{"status":{"nominatedNodeName":null}}`)
			if _, err := p.handle.ClientSet().CoreV1().Pods(m.Namespace).Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
				klog.FromContext(ctx).V(2).Info("Cannot clear nomination", "pod", klog.KObj(m), "err", err)
			}
		}
	}
}

// startEvictions records that the victims' evictions are under way, before
// the writes start, so that nothing reads them as failed or not tried.
func (p *Plugin) startEvictions(nom *nomination, victims []*corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range victims {
		e := nom.evictions[v.UID]
		if e == nil {
			e = &eviction{}
			nom.evictions[v.UID] = e
		}
		e.tries++
		e.inFlight, e.err = true, nil
	}
}

// errHeldBack marks a victim not evicted because another one's eviction
// was refused.
var errHeldBack = errors.New("not evicted while another victim's eviction is refused")

// evictVictims makes the API writes that evict the victims and records
// how each went. The deletes are first sent as a dry run, which runs
// admission (policies, webhooks) without deleting: if any is refused,
// none is evicted, since part of the room gains the gang nothing. If any
// failed, the gang's members are sent round again once evictRetryAfter
// has passed, to try again or give up: nothing else would wake them,
// since nothing changes in the cluster.
func (p *Plugin) evictVictims(ctx context.Context, gang string, nom *nomination, victims []*corev1.Pod) {
	logger := klog.FromContext(ctx)
	// A hung call would keep the evictions in flight, and the gang
	// waiting, for good.
	ctx, cancel := context.WithTimeout(ctx, evictTimeout)
	defer cancel()
	errs := make([]error, len(victims))
	workqueue.ParallelizeUntil(ctx, apiWriters, len(victims), func(i int) {
		errs[i] = p.deleteVictim(ctx, victims[i], true)
	})
	refused := slices.ContainsFunc(errs, func(err error) bool { return err != nil })
	if refused {
		for i, err := range errs {
			if err == nil {
				errs[i] = errHeldBack
			}
		}
	} else {
		workqueue.ParallelizeUntil(ctx, apiWriters, len(victims), func(i int) {
			errs[i] = p.evict(ctx, victims[i], gang)
		})
	}
	failed := false
	p.mu.Lock()
	for i, err := range errs {
		if err != nil {
			failed = true
			if err != errHeldBack {
				logger.Error(err, "Cannot evict for gang", "gang", gang, "victim", klog.KObj(victims[i]))
			}
		}
		if e := nom.evictions[victims[i].UID]; e != nil {
			e.inFlight, e.at, e.err = false, time.Now(), err
		}
	}
	p.mu.Unlock()
	if failed {
		time.AfterFunc(p.evictRetry, func() { p.retryGang(logger, gang) })
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

// failedEvictions is where the victims stand whose last eviction failed
// and that are still there, not terminating.
type failedEvictions struct {
	// again are to be evicted again now.
	again []*corev1.Pod
	// stuck name the victims refused evictTries times, and why.
	stuck []string
	// waiting name the victims refused, to be tried again at next.
	waiting []string
	next    time.Time
	// notEvicted are all of them.
	notEvicted []types.UID
}

func (p *Plugin) failedEvictions(nom *nomination) failedEvictions {
	type failedTry struct {
		uid   types.UID
		name  types.NamespacedName
		tries int
		at    time.Time
		err   error
	}
	var failed []failedTry
	p.mu.Lock()
	for uid, e := range nom.evictions {
		if !e.inFlight && e.err != nil {
			failed = append(failed, failedTry{uid, nom.victims[uid], e.tries, e.at, e.err})
		}
	}
	p.mu.Unlock()
	var out failedEvictions
	for _, f := range failed {
		v, err := p.pods.Pods(f.name.Namespace).Get(f.name.Name)
		if err != nil || v.UID != f.uid || v.DeletionTimestamp != nil {
			continue // gone, or going, after all
		}
		out.notEvicted = append(out.notEvicted, f.uid)
		refused := f.err != errHeldBack
		why := fmt.Sprintf("%s (%v)", f.name, f.err)
		switch {
		case refused && f.tries >= evictTries:
			out.stuck = append(out.stuck, why)
		case time.Since(f.at) >= p.evictRetry:
			out.again = append(out.again, v)
		case refused:
			out.waiting = append(out.waiting, why)
			if at := f.at.Add(p.evictRetry); at.After(out.next) {
				out.next = at
			}
		}
	}
	slices.Sort(out.stuck)
	slices.Sort(out.waiting)
	slices.SortFunc(out.again, func(a, b *corev1.Pod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return out
}

// heldForVictims counts the allocated claims whose devices are not free
// yet for the gang: those recorded when the victims were evicted, any
// claim generated for a victim or reserved for victims alone, and any
// claim on a node of the nomination reserved only for pods that are
// gone. Looking at every claim covers what the nomination could not
// record: a scheduler that restarts rebuilds it from the pods before its
// claim cache has caught up, and from the pods that still exist then,
// while the claims of victims gone are deallocated only when the
// ResourceClaim controller gets to them. Until they are, the gang's plan
// finds no room, and marking the room unusable then would hand it to the
// next pod.
func (p *Plugin) heldForVictims(nom *nomination) (int, error) {
	claims, err := p.handle.SharedDRAManager().ResourceClaims().List()
	if err != nil {
		return 0, err
	}
	held := 0
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		recorded := nom.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}]
		switch {
		case (recorded || ownedByVictim(c, nom.victims)) && onlyReservedFor(c, nom.victims):
			held++
		case len(c.Status.ReservedFor) > 0 && p.releasing(c, nom) && p.onNominatedNode(c, nom):
			held++
		}
	}
	return held, nil
}

// releasing reports whether every consumer of a claim is a victim or a
// pod that is gone: the claim is about to be deallocated.
func (p *Plugin) releasing(c *resourceapi.ResourceClaim, nom *nomination) bool {
	for _, r := range c.Status.ReservedFor {
		if _, ok := nom.victims[r.UID]; ok {
			continue
		}
		if r.APIGroup != "" || r.Resource != "pods" {
			return false
		}
		if pod, err := p.pods.Pods(c.Namespace).Get(r.Name); err == nil && pod.UID == r.UID {
			return false
		}
	}
	return true
}

// onNominatedNode reports whether a claim's devices are on a node the
// nomination freed or reserved.
func (p *Plugin) onNominatedNode(c *resourceapi.ResourceClaim, nom *nomination) bool {
	sel := c.Status.Allocation.NodeSelector
	if !nodeLocal(sel) {
		return false
	}
	node := sel.NodeSelectorTerms[0].MatchFields[0].Values[0]
	p.mu.Lock()
	_, nominated := nom.nodes[node]
	p.mu.Unlock()
	if nominated {
		return true
	}
	for _, n := range nom.victimNodes {
		if n == node {
			return true
		}
	}
	return false
}

// ownedByVictim reports whether a claim was generated for one of the
// victims: it goes with the pod.
func ownedByVictim(c *resourceapi.ResourceClaim, victims map[types.UID]types.NamespacedName) bool {
	for _, o := range c.OwnerReferences {
		if _, ok := victims[o.UID]; ok {
			return true
		}
	}
	return false
}

// victimUnits groups the pods of lower priority into jobs: a gang with all
// its pods, or a lone pod. A gang with any member that may not be evicted
// is not a candidate. Upstream pod groups are evicted as their
// disruptionMode says: pod by pod (Single) or whole, up to the highest
// group with mode All.
func (p *Plugin) victimUnits(nodes []fwk.NodeInfo, prio int32) []victimUnit {
	byKey := map[string]*victimUnit{}
	blocked := map[string]bool{}
	unitOf := map[string]string{} // gang key -> unit key, "" for pod by pod
	var keys []string
	for _, ni := range nodes {
		for _, pi := range ni.GetPods() {
			v := pi.GetPod()
			key := "pod " + v.Namespace + "/" + v.Name
			if gk := gangKeyOf(v); gk != "" {
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
				if unit != "" {
					key = unit
				}
			}
			if v.DeletionTimestamp != nil {
				continue
			}
			if corev1helpers.PodPriority(v) >= prio || v.Annotations[AnnotationPreemptible] == "false" {
				blocked[key] = true
				continue
			}
			u := byKey[key]
			if u == nil {
				u = &victimUnit{Unit: preemption.Unit{ID: key, Priority: corev1helpers.PodPriority(v)}}
				byKey[key] = u
				keys = append(keys, key)
			}
			u.Priority = max(u.Priority, corev1helpers.PodPriority(v))
			u.pods = append(u.pods, v)
			u.Pods++
			u.GPUs += p.devicesHeld(v)
		}
	}
	sort.Strings(keys)
	pdbs := p.pdbs()
	var out []victimUnit
	for _, k := range keys {
		if blocked[k] {
			continue
		}
		u := byKey[k]
		u.PDBViolations = pdbViolations(pdbs, u.pods)
		out = append(out, *u)
	}
	return out
}

// devicesHeld counts the devices allocated to a pod's claims.
func (p *Plugin) devicesHeld(pod *corev1.Pod) int {
	n := 0
	for _, c := range p.claimsOf(pod) {
		if c.Status.Allocation != nil {
			n += len(c.Status.Allocation.Devices.Results)
		}
	}
	return n
}

func (p *Plugin) claimsOf(pod *corev1.Pod) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	names := map[string]bool{}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			names[*pc.ResourceClaimName] = true
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			names[*st.ResourceClaimName] = true
		}
	}
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil {
		names[ext.ResourceClaimName] = true
	}
	for name := range names {
		if c, err := p.handle.SharedDRAManager().ResourceClaims().Get(pod.Namespace, name); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func (p *Plugin) pdbs() []*policyv1.PodDisruptionBudget {
	if p.pdbLister == nil {
		return nil
	}
	list, err := p.pdbLister.List(labels.Everything())
	if err != nil {
		return nil
	}
	return list
}

// pdbViolations counts the budgets that evicting pods would break.
func pdbViolations(pdbs []*policyv1.PodDisruptionBudget, pods []*corev1.Pod) int {
	n := 0
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		hit := 0
		for _, v := range pods {
			if v.Namespace == pdb.Namespace && sel.Matches(labels.Set(v.Labels)) {
				hit++
			}
		}
		if hit > 0 && hit > int(pdb.Status.DisruptionsAllowed) {
			n++
		}
	}
	return n
}

// adjustFor simulates evicting the units of set: their requests and pod
// slots come back, and the devices of claims only they use are freed.
func (p *Plugin) adjustFor(units []victimUnit, set []int, base *structured.AllocatedState) *adjustment {
	adj := &adjustment{freed: map[string]corev1.ResourceList{}, freedPods: map[string]int{}}
	victims := map[types.UID]bool{}
	for _, i := range set {
		for _, v := range units[i].pods {
			victims[v.UID] = true
		}
	}
	state := cloneAllocated(base)
	for _, i := range set {
		for _, v := range units[i].pods {
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
			for _, c := range p.claimsOf(v) {
				if c.Status.Allocation == nil || !onlyVictims(c, victims) {
					continue
				}
				applyAllocation(state, c.Status.Allocation.Devices.Results, false)
			}
		}
	}
	adj.allocated = state
	return adj
}

// onlyVictims reports whether every consumer of a claim is being evicted.
func onlyVictims(c *resourceapi.ResourceClaim, victims map[types.UID]bool) bool {
	for _, r := range c.Status.ReservedFor {
		if !victims[r.UID] {
			return false
		}
	}
	return true
}

// evict marks a victim with DisruptionTarget, as the scheduler's own
// preemption does, and deletes it.
func (p *Plugin) evict(ctx context.Context, v *corev1.Pod, gang string) error {
	cs := p.handle.ClientSet()
	cond := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler,
		Message: fmt.Sprintf("%s: preempted to make room for gang %s", Name, gang), LastTransitionTime: metav1.Now()}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Pods(v.Namespace).Patch(ctx, v.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("mark victim %s/%s: %w", v.Namespace, v.Name, err)
	}
	if err := p.deleteVictim(ctx, v, false); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Evicted for gang", "victim", klog.KObj(v), "gang", gang)
	return nil
}

// deleteVictim deletes a victim, the same pod only (its UID), or with
// dryRun asks whether the API server would let it be deleted.
func (p *Plugin) deleteVictim(ctx context.Context, v *corev1.Pod, dryRun bool) error {
	opts := metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(v.UID))}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if err := p.handle.ClientSet().CoreV1().Pods(v.Namespace).Delete(ctx, v.Name, opts); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("evict victim %s/%s: %w", v.Namespace, v.Name, err)
	}
	return nil
}

// assignNominations gives every pending member a node of its shape's
// plan (members in name order onto nodes in name order): the preemptor's
// node, and the others' to write.
func (p *Plugin) assignNominations(g *gangSpec, byShape map[string]map[string]int, preemptor *corev1.Pod) (string, map[*corev1.Pod]string) {
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
	mine, others := "", map[*corev1.Pod]string{}
	for _, m := range members {
		shape := shapeKey(m)
		if len(slots[shape]) == 0 {
			continue
		}
		node := slots[shape][0]
		slots[shape] = slots[shape][1:]
		if m.UID == preemptor.UID {
			mine = node // the scheduler writes the preemptor's own nomination
		} else {
			others[m] = node
		}
	}
	return mine, others
}

// apiWriters bounds the concurrent API writes of one preemption.
const apiWriters = 16

// nominate writes status.nominatedNodeName on members.
func (p *Plugin) nominate(ctx context.Context, nodes map[*corev1.Pod]string) {
	members := slices.Collect(maps.Keys(nodes))
	workqueue.ParallelizeUntil(ctx, apiWriters, len(members), func(i int) {
		m := members[i]
		patch := []byte(fmt.Sprintf(`{"status":{"nominatedNodeName":%q}}`, nodes[m]))
		if _, err := p.handle.ClientSet().CoreV1().Pods(m.Namespace).Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot nominate gang member", "pod", klog.KObj(m), "err", err)
		}
	})
}

// onlyReservedFor reports whether a claim is still held by nothing but
// victims (a claim that a new consumer took is not waited for).
func onlyReservedFor(c *resourceapi.ResourceClaim, victims map[types.UID]types.NamespacedName) bool {
	for _, r := range c.Status.ReservedFor {
		if _, ok := victims[r.UID]; !ok {
			return false
		}
	}
	return true
}

// reservesAgainst reports whether the nomination's room is kept from
// other pods of priority prio: those of the same or lower priority, while
// the nomination lives. Equal priority counts, as kube-scheduler counts
// nominated pods of equal priority against a pod: otherwise two gangs of
// one priority that preempt at the same time evict for the same room,
// and the one that loses the race waits out nominationTTL.
func (n *nomination) reservesAgainst(prio int32) bool {
	return n.priority >= prio && time.Since(n.at) <= nominationTTL
}

// reservedNodes lists the nodes whose freed room is nominated to other
// gangs and reserved against priority prio: a plan must not count it.
func (p *Plugin) reservedNodes(prio int32, gang string) sets.Set[string] {
	p.rebuildNominations()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := sets.New[string]()
	for key, nom := range p.nominations {
		if key == gang || !nom.reservesAgainst(prio) {
			continue
		}
		for n, c := range nom.nodes {
			if c > 0 {
				out.Insert(n)
			}
		}
	}
	return out
}

// rebuildNominations restores, once, the preemptions in flight when the
// scheduler (re)started: a gang's room from its members'
// status.nominatedNodeName, its victims from the terminating pods whose
// DisruptionTarget condition names the gang.
func (p *Plugin) rebuildNominations() {
	p.rebuild.Do(func() {
		pods, err := p.pods.List(labels.Everything())
		if err != nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, pod := range pods {
			if key := gangKeyOf(pod); key != "" && pod.Spec.NodeName == "" && pod.Status.NominatedNodeName != "" {
				nom := p.nominations[key]
				if nom == nil {
					nom = newNomination(corev1helpers.PodPriority(pod))
					p.nominations[key] = nom
				}
				nom.nodes[pod.Status.NominatedNodeName]++
			}
		}
		for _, pod := range pods {
			if pod.DeletionTimestamp == nil {
				continue
			}
			for _, c := range pod.Status.Conditions {
				if c.Type != corev1.DisruptionTarget || c.Reason != corev1.PodReasonPreemptionByScheduler {
					continue
				}
				if gang, ok := strings.CutPrefix(c.Message, Name+": preempted to make room for gang "); ok {
					if nom := p.nominations[gang]; nom != nil {
						p.addVictim(nom, pod)
					}
				}
			}
		}
	})
}

// reservedFor tells whether a node holds room nominated to another gang
// and reserved against priority prio, and which gang.
func (p *Plugin) reservedFor(node string, prio int32, gang string) string {
	p.rebuildNominations()
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, nom := range p.nominations {
		if key == gang || !nom.reservesAgainst(prio) {
			continue
		}
		if nom.nodes[node] > 0 {
			return key
		}
	}
	return ""
}

// clearNomination drops a gang's reservation (it was placed, or it can no
// longer be).
func (p *Plugin) clearNomination(key string) {
	p.mu.Lock()
	delete(p.nominations, key)
	p.mu.Unlock()
}

// hasNominations reports whether any gang holds reserved room.
func (p *Plugin) hasNominations() bool {
	p.rebuildNominations()
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.nominations) > 0
}

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

// roomBound is an upper bound on how many members of the gang's scarcest
// shape fit once a set of units is evicted, from two capacity estimates:
// with no eviction, and with every candidate evicted. A node that no
// evicted unit ran on keeps its capacity without evictions, because
// what a victim frees (requests, pod slots, devices of node-local slices)
// is on its own node. The victim search asks it before each simulation:
// a set that cannot free enough room is turned down without planning
// over every node (on a full cluster, most of the search's questions).
type roomBound struct {
	want      int
	base, all map[string]int
	unitNodes [][]string
}

// roomBound returns nil where the bound would not hold: a victim with
// devices that are not node-local (freeing them helps other nodes).
func (p *Plugin) roomBound(ctx context.Context, shapes []*shape, nodes []fwk.NodeInfo, units []victimUnit, allocated *structured.AllocatedState, probe *filterProbe, blocked sets.Set[string]) *roomBound {
	if len(shapes) == 0 || len(units) == 0 {
		return nil
	}
	b := &roomBound{want: shapes[0].pending, unitNodes: make([][]string, len(units))}
	every := make([]int, len(units))
	for i, u := range units {
		every[i] = i
		for _, v := range u.pods {
			for _, c := range p.claimsOf(v) {
				if c.Status.Allocation != nil && !nodeLocal(c.Status.Allocation.NodeSelector) {
					return nil
				}
			}
			b.unitNodes[i] = append(b.unitNodes[i], v.Spec.NodeName)
		}
	}
	var err error
	s := shapes[0]
	if b.base, _, err = p.capacity.capacities(ctx, s.pod, s.pending, nodes, p.adjustFor(units, nil, allocated), probe); err != nil {
		return nil
	}
	if b.all, _, err = p.capacity.capacities(ctx, s.pod, s.pending, nodes, p.adjustFor(units, every, allocated), probe); err != nil {
		return nil
	}
	for n := range blocked {
		b.base[n], b.all[n] = 0, 0
	}
	return b
}

// enough reports whether evicting set could make room for the scarcest
// shape; false means it cannot.
func (b *roomBound) enough(set []int) bool {
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

// nodeLocal reports whether an allocation's node selector names one node
// (devices of a node's own slices), as the allocator writes it.
func nodeLocal(sel *corev1.NodeSelector) bool {
	if sel == nil || len(sel.NodeSelectorTerms) != 1 {
		return false
	}
	t := sel.NodeSelectorTerms[0]
	return len(t.MatchExpressions) == 0 && len(t.MatchFields) == 1 && t.MatchFields[0].Key == "metadata.name" &&
		t.MatchFields[0].Operator == corev1.NodeSelectorOpIn && len(t.MatchFields[0].Values) == 1
}
