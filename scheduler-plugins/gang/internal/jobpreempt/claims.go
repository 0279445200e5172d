package jobpreempt

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Claim accounting: which claims a victim holds, which ones an eviction
// frees, and which ones still hold the room of a nomination.

// claimsOf returns the claims a pod uses that the scheduler knows.
func (j *Preemptor) claimsOf(pod *corev1.Pod) []*resourceapi.ResourceClaim {
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
	var out []*resourceapi.ResourceClaim
	tracker := j.host.Claims()
	for name := range names {
		if c, err := tracker.Get(pod.Namespace, name); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// devicesHeld counts the devices allocated to a pod's claims.
func (j *Preemptor) devicesHeld(pod *corev1.Pod) int {
	n := 0
	for _, c := range j.claimsOf(pod) {
		if c.Status.Allocation != nil {
			n += len(c.Status.Allocation.Devices.Results)
		}
	}
	return n
}

// FreedClaims returns the allocated claims of a pod that evicting the
// pods of victims frees: those no other pod uses.
func (j *Preemptor) FreedClaims(pod *corev1.Pod, victims map[types.UID]bool) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for _, c := range j.claimsOf(pod) {
		if c.Status.Allocation != nil && onlyVictims(c, victims) {
			out = append(out, c)
		}
	}
	return out
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
func (j *Preemptor) heldForVictims(nom *Nomination) (int, error) {
	claims, err := j.host.Claims().List()
	if err != nil {
		return 0, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	held := 0
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		recorded := nom.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}]
		switch {
		case (recorded || ownedByVictim(c, nom.victims)) && onlyReservedFor(c, nom.victims):
			held++
		case len(c.Status.ReservedFor) > 0 && j.releasing(c, nom) && onNominatedNode(c, nom):
			held++
		}
	}
	return held, nil
}

// releasing reports whether every consumer of a claim is a victim or a
// pod that is gone: the claim is about to be deallocated.
func (j *Preemptor) releasing(c *resourceapi.ResourceClaim, nom *Nomination) bool {
	for _, r := range c.Status.ReservedFor {
		if _, ok := nom.victims[r.UID]; ok {
			continue
		}
		if r.APIGroup != "" || r.Resource != "pods" {
			return false
		}
		if pod, err := j.pods.Pods(c.Namespace).Get(r.Name); err == nil && pod.UID == r.UID {
			return false
		}
	}
	return true
}

// onNominatedNode reports whether a claim's devices are on a node the
// nomination freed or reserved.
func onNominatedNode(c *resourceapi.ResourceClaim, nom *Nomination) bool {
	sel := c.Status.Allocation.NodeSelector
	if !NodeLocal(sel) {
		return false
	}
	node := sel.NodeSelectorTerms[0].MatchFields[0].Values[0]
	if _, nominated := nom.nodes[node]; nominated {
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
