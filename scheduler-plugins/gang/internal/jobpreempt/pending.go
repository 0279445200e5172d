package jobpreempt

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Pending says why a gang may not preempt now, "" if it may. It keeps a
// gang from evicting a second round while victims of the first are still
// terminating or their claims still allocated, drives the evictions that
// failed (again, or given up after EvictTries), and keeps the gang from
// evicting again right after the room it made could not be used: then
// its nominations are cleared and it backs off for NominationTTL. It
// makes no API write itself.
func (j *Preemptor) Pending(ctx context.Context, gang string) string {
	nom := j.get(gang)
	if nom == nil {
		return ""
	}
	// A victim whose eviction failed is still bound and holds its room:
	// evict it again, and after EvictTries give the room up, naming it.
	// Those held back with it are not victims any more either.
	fe := j.failedEvictions(nom)
	if len(fe.stuck) > 0 {
		why := "could not evict " + strings.Join(fe.stuck, ", ")
		at := j.giveRoomBack(gang, nom, fe.notEvicted, why)
		return fmt.Sprintf("gang %s: %s; nominations cleared, nothing more evicted before %s", gang, why, at.Add(NominationTTL).Format(time.RFC3339))
	}
	if len(fe.again) > 0 {
		j.startEvictions(nom, fe.again)
		go j.evictVictims(context.WithoutCancel(ctx), gang, nom, fe.again)
		names := make([]string, len(fe.again))
		for i, v := range fe.again {
			names[i] = v.Namespace + "/" + v.Name
		}
		return fmt.Sprintf("gang %s: evicting %s again, the last try failed", gang, strings.Join(names, ", "))
	}
	if len(fe.waiting) > 0 {
		return fmt.Sprintf("gang %s: could not evict %s; trying again at %s", gang, strings.Join(fe.waiting, ", "), fe.next.Format(time.RFC3339))
	}
	if left := j.victimsLeft(nom); left > 0 {
		return fmt.Sprintf("gang %s: waiting for %s evicted for it to terminate", gang, plural(left, "pod"))
	}
	held, err := j.heldForVictims(nom)
	if err != nil {
		return fmt.Sprintf("gang %s: cannot tell whether the claims of evicted pods are deallocated: %v", gang, err)
	}
	if held > 0 {
		return fmt.Sprintf("gang %s: waiting for %s of evicted pods to be deallocated", gang, plural(held, "ResourceClaim"))
	}
	j.mu.Lock()
	spent, freed, at, why := nom.spent, nom.freed, nom.at, nom.why
	if !spent && !freed {
		nom.freed = true
	}
	j.mu.Unlock()
	switch {
	case spent && time.Since(at) < NominationTTL:
		return fmt.Sprintf("gang %s: %s; not evicting again before %s", gang, why, at.Add(NominationTTL).Format(time.RFC3339))
	case spent:
		j.Clear(gang)
		return ""
	case !freed:
		// The plan that just failed may have read the claims before the
		// victims' were released: one more try, on a plan computed from
		// now, before deciding that the room cannot be used.
		j.host.Retry(klog.FromContext(ctx), gang)
		return fmt.Sprintf("gang %s: the pods evicted for it are gone; trying again in the room they left", gang)
	}
	if nom.restored {
		// A scheduler that stopped mid-preemption may have evicted only
		// part of what the room needs, or nothing: plan it again now.
		j.Clear(gang)
		j.clearNominatedNodes(gang)
		return ""
	}
	// The victims are gone and the gang still does not fit: give the room
	// back, evict nothing more for now.
	why = "the room an earlier preemption made could not be used"
	j.giveRoomBack(gang, nom, nil, why)
	return fmt.Sprintf("gang %s: %s; nominations cleared, nothing more evicted", gang, why)
}

// victimsLeft counts the victims still there: terminating, or still in
// the scheduler's snapshot. The pod lister can show a victim gone before
// the snapshot, which plans read, has let go of its room. A victim that
// was waiting in Permit was rejected, not deleted: it is back in the
// queue, with no room held.
func (j *Preemptor) victimsLeft(nom *Nomination) int {
	j.mu.Lock()
	victims := make(map[types.UID]types.NamespacedName, len(nom.victims))
	nodes := make(map[types.UID]string, len(nom.victimNodes))
	for uid, name := range nom.victims {
		victims[uid], nodes[uid] = name, nom.victimNodes[uid]
	}
	j.mu.Unlock()
	left := 0
	for uid, name := range victims {
		if v, err := j.pods.Pods(name.Namespace).Get(name.Name); (err == nil && v.UID == uid && v.DeletionTimestamp != nil) || j.inSnapshot(uid, nodes[uid]) {
			left++
		}
	}
	return left
}

// giveRoomBack ends a nomination that cannot be used: its room is no
// longer reserved, the members' nominated nodes are queued to be
// cleared, and the gang evicts nothing more for NominationTTL, saying
// why. Victims in keep were never evicted: they are no longer victims,
// and nothing waits for them. It returns when the back-off started.
func (j *Preemptor) giveRoomBack(gang string, nom *Nomination, keep []types.UID, why string) time.Time {
	j.mu.Lock()
	nom.spent, nom.at, nom.nodes, nom.why = true, time.Now(), nil, why
	for _, uid := range keep {
		delete(nom.victims, uid)
		delete(nom.victimNodes, uid)
		delete(nom.evictions, uid)
	}
	at := nom.at
	j.mu.Unlock()
	j.clearNominatedNodes(gang)
	return at
}

// clearNominatedNodes queues the clearing of the nominated nodes of a
// gang's pending members.
func (j *Preemptor) clearNominatedNodes(gang string) {
	for _, m := range j.host.Members(gang) {
		if m.Spec.NodeName == "" && (m.Status.NominatedNodeName != "" || j.writer.nominates(m.UID)) {
			j.writer.want(m, "")
		}
	}
}

// inSnapshot reports whether the scheduler's snapshot still has the pod
// on the node.
func (j *Preemptor) inSnapshot(uid types.UID, node string) bool {
	if node == "" {
		return false
	}
	ni, err := j.host.Snapshot().NodeInfos().Get(node)
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

// plural writes a count and a noun, with an s unless the count is one.
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
