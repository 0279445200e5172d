package gang

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// All or nothing, and what happens after.
//
// Members wait in Permit until every gang of their group has minMember
// members placed; the member that completes the group lets them all go.
// Counting, letting go, releasing and timing out all happen under the
// plugin's lock and in rounds (gen): a release or a timeout ends the
// round and rejects its waiting members, and only members that joined the
// current round count, so a member rejected while the last one arrives
// is never counted and the last one waits instead of binding alone.
// Timeouts are the plugin's own timers (the scheduler's Permit timeout is
// a later backstop), so they too end a round under the lock.
//
// Once a group is let go, its members bind independently. A member whose
// PreBind or Bind then fails (an API error, an admission webhook) does not
// bring down members that bound: it is reported on its PodGroup
// (Scheduled=False, reason BindFailed, and an event) and retried alone;
// its plan puts it beside the bound members, inside the gang's required
// domain, and the condition turns back to Scheduled once it binds.

// permitGrace is how much longer than the gang's timeout the scheduler
// waits before its own Permit timeout rejects a member.
const permitGrace = 30 * time.Second

// ReasonBindFailed says a member of an allowed gang failed to bind.
const ReasonBindFailed = "BindFailed"

// Permit implements fwk.PermitPlugin.
func (p *Plugin) Permit(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) (*fwk.Status, time.Duration) {
	g := p.confined(p.gangOf(pod))
	if g == nil || g.upstream {
		return nil, 0
	}
	if g.err != nil {
		// The group changed since PreEnqueue (a gang stopped listing
		// this one): never complete it without that gang.
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, g.err.Error()), 0
	}
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	if g.matchPolicy == MatchOnceSatisfied && p.onceSatisfied(g, pod) {
		p.allowed[pod.UID] = g.key
		p.mu.Unlock()
		return nil, 0
	}
	round := g.group[0]
	gen := p.gen[round]
	group := sets.New(g.group...)
	waiting := map[string]int{g.key: 1}
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		uid := wp.GetPod().UID
		if k := gangKeyOf(wp.GetPod()); group.Has(k) && uid != pod.UID {
			if wg, ok := p.waitGen[uid]; ok && wg == gen {
				waiting[k]++
			}
		}
	})
	for _, key := range g.group {
		spec := g
		if key != g.key {
			spec = p.specByKey(key, nil)
		}
		if spec.err != nil {
			// A gang of the group that cannot be read (its PodGroup not
			// seen yet, a refused annotation) has no minMember to count
			// against: the group is not complete without it.
			p.waitGen[pod.UID] = gen
			p.mu.Unlock()
			logger.V(4).Info("Gang member waits for a gang of its group", "pod", klog.KObj(pod), "gang", key, "err", spec.err)
			time.AfterFunc(g.timeout, func() {
				p.releaseRound(g, gen, fmt.Sprintf("gang %s: %v; released the members that waited", key, spec.err))
			})
			return fwk.NewStatus(fwk.Wait, fmt.Sprintf("gang %s: %v", key, spec.err)), g.timeout + permitGrace
		}
		have := waiting[key]
		if spec.matchPolicy != MatchOnlyWaiting {
			for _, m := range p.members(key) {
				if m.Spec.NodeName != "" {
					have++
				}
			}
		}
		if have < spec.minMember {
			p.waitGen[pod.UID] = gen
			p.mu.Unlock()
			logger.V(4).Info("Gang member waits", "pod", klog.KObj(pod), "gang", key, "have", have, "minMember", spec.minMember)
			time.AfterFunc(g.timeout, func() {
				p.releaseRound(g, gen, fmt.Sprintf("gang %s: not every member was placed within %s; released the %s", key, g.timeout, "members that waited"))
			})
			// Members that failed an earlier attempt may sit in backoff
			// or among the unschedulable pods: retry them now.
			p.wakeGroup(logger, g.key)
			return fwk.NewStatus(fwk.Wait, fmt.Sprintf("gang %s has %d of %d members placed", key, have, spec.minMember)), g.timeout + permitGrace
		}
	}
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		uid := wp.GetPod().UID
		if wg, ok := p.waitGen[uid]; ok && wg == gen && group.Has(gangKeyOf(wp.GetPod())) {
			delete(p.waitGen, uid)
			p.allowed[uid] = gangKeyOf(wp.GetPod())
			wp.Allow(Name)
		}
	})
	p.allowed[pod.UID] = g.key
	p.gen[round]++
	for _, k := range g.group {
		p.markSatisfied(g, k)
		delete(p.plans, k)
		p.clearNomination(k)
		delete(p.failures, k)
	}
	p.mu.Unlock()
	for _, k := range g.group {
		p.status.scheduled(p.specByKey(k, nil))
	}
	return nil, 0
}

// PostBind implements fwk.PostBindPlugin: a bound member is no longer
// one that could fail after being let go.
func (p *Plugin) PostBind(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	p.forgetPod(pod.UID)
}

// forgetPod drops what the plugin keeps about a member.
func (p *Plugin) forgetPod(uid types.UID) {
	p.mu.Lock()
	delete(p.allowed, uid)
	delete(p.waitGen, uid)
	delete(p.rejected, uid)
	p.mu.Unlock()
	p.jobs.ForgetPod(uid)
}

// forgetGang drops what the plugin keeps about a gang whose last pod is
// gone.
func (p *Plugin) forgetGang(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.plans, key)
	delete(p.failures, key)
	delete(p.satisfied, key)
	delete(p.incarnations, key)
	p.clearNomination(key)
	delete(p.gen, key)
	p.sortMu.Lock()
	delete(p.sortCache, key)
	p.sortMu.Unlock()
}

// Unreserve implements fwk.ReservePlugin: a member failing before its
// group was let go (rejected in Permit, timed out) releases the whole
// group; one failing after (PreBind, Bind) is reported and retried alone.
func (p *Plugin) Unreserve(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) {
	if isUpstreamMember(state) {
		// No plan, no Permit round: nothing to undo.
		return
	}
	g := p.confined(p.gangOf(pod))
	if g == nil {
		return
	}
	p.mu.Lock()
	if pl := p.plans[g.key]; pl != nil {
		if at, ok := pl.assigned[pod.UID]; ok {
			delete(pl.assigned, pod.UID)
			pl.remaining[at.shape][at.node]++
		}
	}
	_, wasAllowed := p.allowed[pod.UID]
	released := p.rejected[pod.UID]
	delete(p.allowed, pod.UID)
	delete(p.waitGen, pod.UID)
	delete(p.rejected, pod.UID)
	p.mu.Unlock()
	switch {
	case released:
		// Rejected by the plugin with the rest of its round, which is
		// over: the group may be in a new round by now.
	case g.upstream:
		// An upstream group's cycle reserves and unreserves every member
		// while it tries placements; its failures are the in-tree plugin's.
	case wasAllowed && !p.boundEnough(g):
		p.status.bindFailed(g, fmt.Sprintf("member %s failed to bind after the gang was let go; members already bound stay, and %s is retried beside them", pod.Name, pod.Name))
	case wasAllowed:
		// A member beyond minMember: retried alone, nothing to report.
	default:
		p.releaseGroup(g, fmt.Sprintf("member %s was released", pod.Name))
	}
}

// releaseGroup ends the current round of the gang's group: its waiting
// members are rejected and the plans dropped.
func (p *Plugin) releaseGroup(g *gangSpec, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(g, fmt.Sprintf("gang %s: %s", g.key, why))
}

// releaseRound releases the group if round gen is still the current one
// (a member's own timeout).
func (p *Plugin) releaseRound(g *gangSpec, gen uint64, why string) {
	p.mu.Lock()
	if p.gen[g.group[0]] != gen {
		p.mu.Unlock()
		return
	}
	p.releaseLocked(g, why)
	p.mu.Unlock()
	if !p.boundEnough(g) {
		p.status.unschedulable(g, why)
	}
}

func (p *Plugin) releaseLocked(g *gangSpec, why string) {
	p.gen[g.group[0]]++
	for _, k := range g.group {
		delete(p.plans, k)
	}
	group := sets.New(g.group...)
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if group.Has(gangKeyOf(wp.GetPod())) {
			uid := wp.GetPod().UID
			delete(p.waitGen, uid)
			if p.rejected == nil {
				p.rejected = map[types.UID]bool{}
			}
			p.rejected[uid] = true
			wp.Reject(Name, why)
		}
	})
}

// Tracked lists, by kind of state, the gangs the plugin keeps something
// about ("plan", "nomination", "failure", "satisfied"): for debugging, and
// for checks that nothing outlives its gang.
func (p *Plugin) Tracked() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]string{}
	for k := range p.plans {
		out["plan"] = append(out["plan"], k)
	}
	if gangs := p.jobs.Gangs(); len(gangs) > 0 {
		out["nomination"] = gangs
	}
	for k := range p.failures {
		out["failure"] = append(out["failure"], k)
	}
	for k := range p.satisfied {
		out["satisfied"] = append(out["satisfied"], k)
	}
	for _, keys := range out {
		sort.Strings(keys)
	}
	return out
}
