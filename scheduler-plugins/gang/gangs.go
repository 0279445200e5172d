package gang

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

// The gang registry: which gang a pod belongs to, what the gang asks for,
// and which of its members exist. Gangs come from PodGroups (Strata's
// scheduling.sigs.k8s.io/v1alpha1 or upstream scheduling.k8s.io/v1beta1)
// or from the annotations of their pods; members are found through an
// index of the scheduler's pod informer.

const gangIndex = "strata.sh/gang"

// gangOf returns a pod's gang, or nil (also for a member scheduled by a
// profile without gang scheduling; upstream groups are the in-tree
// plugin's in every profile).
func (p *Plugin) gangOf(pod *corev1.Pod) *gangSpec {
	key := gangKeyOf(pod)
	if key == "" || (pod.Spec.SchedulingGroup == nil && !p.inGangProfile(pod)) {
		return nil
	}
	return p.specByKey(key, pod)
}

// specByKey finds a gang by key: its PodGroup, or the annotations of one
// of its pods.
func (p *Plugin) specByKey(key string, member *corev1.Pod) *gangSpec {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pg := p.src.podGroup(ns, name)
	if pg != nil && pg.Labels[schedulingv1alpha1.FromPodAnnotationsLabel] != "true" {
		return specFromPodGroup(pg)
	}
	if pg := p.upstreamPodGroup(ns, name); pg != nil {
		return specFromUpstream(pg, p.ancestors(pg))
	}
	if member == nil {
		if objs, _ := p.podIndex.ByIndex(gangIndex, key); len(objs) > 0 {
			member = objs[0].(*corev1.Pod)
		}
	}
	if member != nil {
		if _, _, ok := annotation(member.Annotations, KeyName); ok {
			// The pods define the gang; the PodGroup strata-controller
			// keeps for it, once there, carries its status.
			g := specFromPod(member, key)
			g.podGroup = pg
			return g
		}
	}
	if pg != nil {
		return specFromPodGroup(pg)
	}
	return &gangSpec{key: key, minMember: 1, group: []string{key},
		err: fmt.Errorf("PodGroup %s not found (pods name it with label %s)", key, schedulingv1alpha1.PodGroupLabel)}
}

// members returns the live pods of a gang.
func (p *Plugin) members(key string) []*corev1.Pod {
	objs, _ := p.podIndex.ByIndex(gangIndex, key)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			out = append(out, pod)
		}
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// wakeGroup moves the pending members of a gang's group to the active
// queue once every gang of the group has minMember pods.
func (p *Plugin) wakeGroup(logger klog.Logger, key string) {
	if key == "" {
		return
	}
	g := p.specByKey(key, nil)
	if g.err != nil || g.upstream {
		return
	}
	pending := map[string]*corev1.Pod{}
	for _, k := range g.group {
		spec := g
		if k != g.key {
			spec = p.specByKey(k, nil)
		}
		members := p.members(k)
		if len(members) < spec.minMember {
			return
		}
		for _, m := range members {
			if m.Spec.NodeName == "" && !p.isWaiting(m.UID) {
				pending[m.Namespace+"/"+m.Name] = m
			}
		}
	}
	if len(pending) > 0 {
		p.handle.Activate(logger, pending)
	}
}

func (p *Plugin) isWaiting(uid types.UID) bool {
	return p.handle.GetWaitingPod(uid) != nil
}

// sortedNodes is used by tests.
func sortedNodes(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// boundEnough reports whether minMember members of the gang are bound:
// such a gang is scheduled, whatever happens to members beyond minMember,
// and its PodGroup never goes back to Scheduled=False for them.
func (p *Plugin) boundEnough(g *gangSpec) bool {
	n := 0
	for _, m := range p.members(g.key) {
		if m.Spec.NodeName != "" {
			n++
		}
	}
	return n >= g.minMember
}

// activateMembers retries the pending members of a gang, whether or not
// the gang is complete (PreEnqueue says why not).
func (p *Plugin) activateMembers(logger klog.Logger, key string) {
	pending := map[string]*corev1.Pod{}
	for _, m := range p.members(key) {
		if m.Spec.NodeName == "" && !p.isWaiting(m.UID) {
			pending[m.Namespace+"/"+m.Name] = m
		}
	}
	if len(pending) > 0 {
		p.handle.Activate(logger, pending)
	}
}

// incarnation is one life of a gang that reached minMember, for the
// once-satisfied match policy: its PodGroup and the members that were
// placed or let go in it. A training operator that restarts a job
// deletes its pods and creates new ones under the same gang name while
// the old ones still terminate; the new pods are a new incarnation and
// must reach minMember again, not be let go one by one on the old one's
// quorum.
type incarnation struct {
	podGroup types.UID
	pods     sets.Set[types.UID]
}

// markSatisfied records, under p.mu, that the gang key of g's group
// reached minMember: its PodGroup and its members bound or let go.
func (p *Plugin) markSatisfied(g *gangSpec, key string) {
	spec := g
	if key != g.key {
		spec = p.specByKey(key, nil)
	}
	inc := &incarnation{pods: sets.New[types.UID]()}
	if spec.podGroup != nil {
		inc.podGroup = spec.podGroup.UID
	}
	for _, m := range p.members(key) {
		if m.Spec.NodeName != "" {
			inc.pods.Insert(m.UID)
		}
	}
	for uid, k := range p.allowed {
		if k == key {
			inc.pods.Insert(uid)
		}
	}
	if p.incarnations == nil {
		p.incarnations = map[string]*incarnation{}
	}
	p.satisfied[key] = true
	p.incarnations[key] = inc
}

// onceSatisfied reports, under p.mu, whether pod joins a gang that
// already reached minMember in its current incarnation: the PodGroup is
// the one that was satisfied and a member of that incarnation is still
// live (not terminating, not finished). pod then belongs to the
// incarnation too. A gang whose incarnation ended is forgotten.
func (p *Plugin) onceSatisfied(g *gangSpec, pod *corev1.Pod) bool {
	inc := p.incarnations[g.key]
	if !p.satisfied[g.key] || inc == nil {
		return false
	}
	if inc.podGroup == "" || (g.podGroup != nil && g.podGroup.UID == inc.podGroup) {
		for _, m := range p.members(g.key) {
			if inc.pods.Has(m.UID) {
				inc.pods.Insert(pod.UID)
				return true
			}
		}
	}
	delete(p.satisfied, g.key)
	delete(p.incarnations, g.key)
	return false
}
