package jobpreempt

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The victims of a preemption are gone, but the devices of their claims
// are free only once the claims are deallocated: until then the gang
// waits, and only then is room it cannot use given back. That holds for
// claims the nomination did not record, as after a scheduler restart that
// rebuilt it before its claim cache had them, or after some victims were
// gone: the gang's claim-blind wait would otherwise clear its nominations
// while the ResourceClaim controller lags, and the first pod to come
// would take the room.
func TestVictimClaimsHoldTheRoom(t *testing.T) {
	victim := types.UID("holder-0")
	claim := func(name string, owner types.UID, node string, reservedFor ...types.UID) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		if owner != "" {
			c.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: string(owner), UID: owner}}
		}
		c.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
		for _, uid := range reservedFor {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: string(uid), UID: uid})
		}
		return c
	}
	deallocated := claim("holder-0-gpus", victim, "h100-0")
	deallocated.Status.Allocation = nil
	// other is a pod that runs on and was not evicted.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other", UID: "other"}, Spec: corev1.PodSpec{NodeName: "h100-0"}}
	shared := claim("shared", "", "h100-0", victim, "other")
	unreserved := claim("pending", "", "h100-0")
	const waitingPod, waiting = "waiting for 1 pod evicted for it to terminate", "waiting for 1 ResourceClaim of evicted pods to be deallocated"
	const retry, given = "the pods evicted for it are gone; trying again in the room they left", "could not be used; nominations cleared"
	for name, tc := range map[string]struct {
		claims   []*resourceapi.ResourceClaim
		recorded string
		victim   *corev1.Pod // the victim's pod, if it is still there
		want     string
	}{
		"generated, reserved for the victim":    {claims: []*resourceapi.ResourceClaim{claim("holder-0-gpus", victim, "h100-0", victim), shared, unreserved}, want: waiting},
		"named, reserved for the victim":        {claims: []*resourceapi.ResourceClaim{claim("gpus", "", "h100-0", victim)}, want: waiting},
		"recorded, unreserved, still allocated": {claims: []*resourceapi.ResourceClaim{claim("gpus", "", "h100-0")}, recorded: "gpus", want: waiting},
		// A victim gone before the nomination was rebuilt is not known
		// as one; its claim is on the room.
		"reserved for a pod gone, on the nominated node": {claims: []*resourceapi.ResourceClaim{claim("holder-1-gpus", "holder-1", "h100-0", "holder-1")}, want: waiting},
		"reserved for a pod gone, elsewhere":             {claims: []*resourceapi.ResourceClaim{claim("job-gpus", "job", "h100-1", "job")}, want: given},
		"deallocated":                                    {claims: []*resourceapi.ResourceClaim{deallocated}, want: given},
		"deleted":                                        {want: given},
		"shared with a pod that was not evicted":         {claims: []*resourceapi.ResourceClaim{shared, unreserved}, want: given},
		"victim terminating": {claims: []*resourceapi.ResourceClaim{claim("holder-0-gpus", victim, "h100-0", victim)},
			victim: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "holder-0", UID: victim, DeletionTimestamp: &metav1.Time{Time: time.Now()}}, Spec: corev1.PodSpec{NodeName: "h100-0"}},
			want:   waitingPod},
		// A victim that waited in Permit was rejected, not deleted: it is
		// back in the queue and holds nothing.
		"victim rejected in Permit": {victim: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "holder-0", UID: victim}}, want: given},
	} {
		pods := []*corev1.Pod{pod("hp-0", "hp", ""), pod("hp-1", "hp", ""), other}
		if tc.victim != nil {
			pods = append(pods, tc.victim)
		}
		j, h := newTestPreemptor(t, tc.claims, pods...)
		nom := NewNomination(1000, map[string]int{"h100-0": 2})
		nom.victims[victim] = types.NamespacedName{Namespace: "default", Name: "holder-0"}
		if tc.recorded != "" {
			nom.claims[types.NamespacedName{Namespace: "default", Name: tc.recorded}] = true
		}
		j.Set("default/hp", nom)
		got := j.Pending(context.Background(), "default/hp")
		if tc.want != given {
			if !strings.Contains(got, tc.want) || nom.spent || nom.nodes == nil || h.retries() != 0 {
				t.Errorf("%s: %q (room given back %v, nodes %v, gang retried %d times); want it to say %q and keep the room",
					name, got, nom.spent, nom.nodes, h.retries(), tc.want)
			}
			continue
		}
		// The plan that failed may predate the release: the gang tries
		// once more before the room is given back.
		if !strings.Contains(got, retry) || nom.spent || h.retries() != 1 {
			t.Errorf("%s: first look %q (room given back %v, gang retried %d times); want it to say %q and the gang retried",
				name, got, nom.spent, h.retries(), retry)
		}
		got = j.Pending(context.Background(), "default/hp")
		if !strings.Contains(got, given) || !nom.spent || nom.nodes != nil {
			t.Errorf("%s: second look %q (room given back %v, nodes %v); want it to say %q and give the room back", name, got, nom.spent, nom.nodes, given)
		}
	}
}
