package jobpreempt

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Room nominated to a gang is reserved against other gangs and pods of
// the same or lower priority (as kube-scheduler counts nominated pods of
// equal priority), not against higher priorities or the gang itself, and
// not after NominationTTL. Without equal priority, two gangs of one
// priority that preempt at once evict for the same room, and the one
// that loses the race backs off for the TTL.
func TestNominatedRoomReservedAgainstEqualPriority(t *testing.T) {
	j, _ := newTestPreemptor(t, nil)
	j.Set("default/hp", NewNomination(1000, map[string]int{"cpu-0": 2}))
	stale := NewNomination(1000, map[string]int{"cpu-1": 1})
	stale.at = time.Now().Add(-NominationTTL - time.Second)
	j.Set("default/old", stale)
	for _, tc := range []struct {
		prio int32
		gang string
		want string
	}{
		{999, "", "default/hp"},
		{1000, "", "default/hp"},
		{1000, "default/other", "default/hp"},
		{1001, "default/other", ""},
		{1000, "default/hp", ""},
	} {
		if got := j.ReservedFor("cpu-0", tc.prio, tc.gang); got != tc.want {
			t.Errorf("ReservedFor(cpu-0, priority %d, gang %q) = %q, want %q", tc.prio, tc.gang, got, tc.want)
		}
		if got := j.ReservedFor("cpu-1", tc.prio, tc.gang); got != "" {
			t.Errorf("ReservedFor(cpu-1, priority %d) = %q after the TTL, want none", tc.prio, got)
		}
		got := j.ReservedNodes(tc.prio, tc.gang)
		if want := tc.want != ""; got.Has("cpu-0") != want || got.Has("cpu-1") {
			t.Errorf("ReservedNodes(priority %d, gang %q) = %v, want cpu-0: %v", tc.prio, tc.gang, sets.List(got), want)
		}
	}
	if diff := cmp.Diff([]string{"default/hp", "default/old"}, j.Gangs()); diff != "" {
		t.Errorf("Gangs (-want +got):\n%s", diff)
	}
	j.Clear("default/hp")
	if j.Nominated("default/hp") || j.ReservedFor("cpu-0", 0, "") != "" {
		t.Error("a cleared nomination still reserves its room")
	}
}

// After a restart the nominations in flight come back from the API: a
// gang's room from its pending members' status.nominatedNodeName, its
// victims from terminating pods whose DisruptionTarget condition names
// the gang. The gang then waits for them instead of evicting again, and
// the room is kept from pods of its priority meanwhile.
func TestNominationsRebuiltAfterRestart(t *testing.T) {
	nominated := func(name, node string) *corev1.Pod {
		p := pod(name, "hp", "")
		p.Status.NominatedNodeName = node
		return p
	}
	victim := pod("holder-0", "", "h100-0")
	victim.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	victim.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonPreemptionByScheduler, Message: "StrataGang: preempted to make room for gang default/hp"}}
	other := pod("other-0", "", "h100-1")
	other.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	other.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonPreemptionByScheduler, Message: "StrataGang: preempted to make room for gang default/gone"}}
	j, _ := newTestPreemptor(t, nil, nominated("hp-0", "h100-0"), nominated("hp-1", "h100-0"), pod("hp-2", "hp", ""), victim, other)
	j.rebuild = sync.Once{} // a restart: restore once more
	if got := j.ReservedFor("h100-0", 0, ""); got != "default/hp" {
		t.Fatalf("ReservedFor(h100-0) = %q after the rebuild, want default/hp", got)
	}
	nom := j.get("default/hp")
	if diff := cmp.Diff(map[string]int{"h100-0": 2}, nom.nodes); diff != "" {
		t.Errorf("rebuilt room (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[types.UID]types.NamespacedName{"holder-0": {Namespace: "default", Name: "holder-0"}}, nom.victims); diff != "" {
		t.Errorf("rebuilt victims (-want +got):\n%s", diff)
	}
	if got, want := j.Pending(context.Background(), "default/hp"), "waiting for 1 pod evicted for it to terminate"; !strings.Contains(got, want) {
		t.Errorf("Pending = %q, want it to say %q", got, want)
	}
	if diff := cmp.Diff([]string{"default/hp"}, j.Gangs()); diff != "" {
		t.Errorf("a victim of a gang with no nomination made one (-want +got):\n%s", diff)
	}
}

// evictedFor marks a pod terminating, evicted for gang.
func evictedFor(p *corev1.Pod, gang string) *corev1.Pod {
	p = markedFor(p, gang)
	p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	return p
}

// markedFor gives a pod the DisruptionTarget condition of a victim of
// gang, as the scheduler writes it before the delete.
func markedFor(p *corev1.Pod, gang string) *corev1.Pod {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonPreemptionByScheduler, Message: "StrataGang: preempted to make room for gang " + gang}}
	return p
}

// A scheduler that takes over a preemption restores it on its first
// scheduling cycle; victims the previous one evicted that start
// terminating only after that join the nomination as the informer shows
// them, and the gang waits for them instead of judging the room without
// them. Before the first cycle (a standby that does not lead) nothing is
// restored, so nothing goes stale. A victim whose gang has no
// nomination (the members' nominated nodes were never written) restores
// one, unless the gang has no pending member left.
func TestVictimsObservedAfterTheRebuild(t *testing.T) {
	member := pod("hp-0", "hp", "")
	member.Status.NominatedNodeName = "h100-0"
	j, h := newTestPreemptor(t, nil, member, pod("hp-1", "hp", ""), pod("lp-0", "lp", ""), markedFor(pod("holder-0", "", "h100-0"), "default/hp"))
	j.rebuild, j.rebuilt = sync.Once{}, atomic.Bool{} // a scheduler that starts
	j.ObservePod(evictedFor(pod("early", "", "h100-0"), "default/hp"))
	if len(j.Gangs()) != 0 {
		t.Fatalf("a pod observed before the first cycle restored %v", j.Gangs())
	}
	if got := j.ReservedFor("h100-0", 0, ""); got != "default/hp" {
		t.Fatalf("ReservedFor(h100-0) = %q after the rebuild, want default/hp", got)
	}
	nom := j.get("default/hp")
	if got := j.Pending(context.Background(), "default/hp"); strings.Contains(got, "waiting") {
		t.Fatalf("Pending = %q with no victim known", got)
	}
	nom.freed = false
	victim := evictedFor(pod("holder-0", "", "h100-0"), "default/hp")
	if err := h.pods.Update(victim); err != nil {
		t.Fatal(err)
	}
	j.ObservePod(victim)
	j.ObservePod(victim) // seen twice, counted once
	if got, want := j.Pending(context.Background(), "default/hp"), "waiting for 1 pod evicted for it to terminate"; !strings.Contains(got, want) {
		t.Errorf("Pending = %q, want it to say %q", got, want)
	}
	if diff := cmp.Diff(map[types.UID]types.NamespacedName{"holder-0": {Namespace: "default", Name: "holder-0"}}, nom.victims); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}

	// A gang with no nomination restores one from a victim; one with no
	// pending member does not.
	j.ObservePod(evictedFor(pod("lp-victim", "", "h100-1"), "default/lp"))
	j.ObservePod(evictedFor(pod("gone-victim", "", "h100-1"), "default/gone"))
	if diff := cmp.Diff([]string{"default/hp", "default/lp"}, j.Gangs()); diff != "" {
		t.Errorf("gangs with a nomination (-want +got):\n%s", diff)
	}
	if lp := j.get("default/lp"); lp == nil || !lp.restored || len(lp.victims) != 1 {
		t.Errorf("default/lp's nomination %+v, want a restored one with its victim", lp)
	}
}

// A restored nomination whose room cannot be used once its victims are
// gone (the scheduler before stopped between marking its victims and
// deleting them, or between two deletes) does not back off: it is
// dropped, its members' nominated nodes queued to be cleared, and the
// gang plans its preemption again at once.
func TestRestoredNominationPlansAgain(t *testing.T) {
	member := pod("hp-0", "hp", "")
	member.Status.NominatedNodeName = "h100-0"
	j, h := newTestPreemptor(t, nil, member, pod("hp-1", "hp", ""), markedFor(pod("holder-0", "", "h100-0"), "default/hp"))
	j.rebuild, j.rebuilt = sync.Once{}, atomic.Bool{}
	if !j.Any() {
		t.Fatal("no nomination restored from the member's nominated node and the marked victim")
	}
	ctx := context.Background()
	if got := j.Pending(ctx, "default/hp"); !strings.Contains(got, "trying again in the room they left") || h.retries() != 1 {
		t.Fatalf("first look: %q (retried %d); want one try on the room", got, h.retries())
	}
	if got := j.Pending(ctx, "default/hp"); got != "" {
		t.Fatalf("second look: %q; want the gang free to preempt again", got)
	}
	if j.Nominated("default/hp") || j.ReservedFor("h100-0", 0, "") != "" {
		t.Error("the restored nomination still holds its room")
	}
	if got := j.writer.queue.Len(); got != 1 {
		t.Errorf("%d nominations queued to be cleared, want 1 (the member nominated)", got)
	}
}

// kube-scheduler writes status.nominatedNodeName on members it holds in
// Permit too: without a pod marked as evicted for the gang, a nominated
// member restores nothing, and its gang's room is not kept from others.
func TestNominatedMembersAloneRestoreNothing(t *testing.T) {
	held := pod("ps-0", "ps", "")
	held.Status.NominatedNodeName = "gpu-0"
	j, _ := newTestPreemptor(t, nil, held, pod("ps-1", "ps", ""), markedFor(pod("old", "", "gpu-1"), "default/other"))
	j.rebuild, j.rebuilt = sync.Once{}, atomic.Bool{}
	if j.Any() || j.ReservedFor("gpu-0", 0, "") != "" {
		t.Errorf("nominations %v restored from a member held in Permit", j.Gangs())
	}
}
