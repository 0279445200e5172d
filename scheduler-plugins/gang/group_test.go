package gang

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// member is member i of a gang declared on pods in namespace ns, with
// min-available n and, when groups is not empty, that groups annotation.
func member(ns, gang string, i, n int, groups string) *corev1.Pod {
	name := fmt.Sprintf("%s-%d", gang, i)
	ann := map[string]string{AnnotationPrefix + KeyName: gang, AnnotationPrefix + KeyMinAvailable: fmt.Sprint(n), AnnotationPrefix + KeyWaitingTime: "1h"}
	if groups != "" {
		ann[KoordPrefix+KeyGroups] = groups
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Annotations: ann}}
}

// TestGroupMemberLeavesForeignGangsAlone: a gang lists a gang that does
// not list it back, of another namespace or of its own. Its member that
// fails does not reject the other gang's waiting members; its member in
// Permit is refused, does not let the other gang go and does not drop the
// other gang's preemption reservation.
func TestGroupMemberLeavesForeignGangsAlone(t *testing.T) {
	tests := map[string]struct {
		listerNS, groups string
		want             string
	}{
		"another namespace": {"team-a", `["a", "team-b/train"]`,
			`"team-b/train" is a gang of namespace "team-b"; a group lists only gangs of its own namespace, "team-a"`},
		"own namespace, not listed back": {"team-b", `["a", "train"]`,
			`gang team-b/a lists team-b/train in its groups annotation, but team-b/train does not list team-b/a back`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			victims := []*corev1.Pod{member("team-b", "train", 0, 3, ""), member("team-b", "train", 1, 3, ""), member("team-b", "train", 2, 3, "")}
			lister := member(tc.listerNS, "a", 0, 1, tc.groups)
			p, h := newTestPlugin(t, append(victims, lister))
			for _, m := range victims[:2] {
				if st := permit(t, p, h, m); st.Code() != fwk.Wait {
					t.Fatalf("%s: %v, want Wait", m.Name, st)
				}
			}
			if st := p.PreEnqueue(context.Background(), lister); st.IsSuccess() || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("PreEnqueue of the listing gang: %v, want refused with %q", st, tc.want)
			}
			// Its member could not be placed, or was rejected in Permit.
			p.Unreserve(context.Background(), nil, lister, "node-a")
			for _, m := range victims[:2] {
				if r := h.waiting[m.UID].rejected; r != "" {
					t.Errorf("%s rejected by the gang that lists it: %q", m.Name, r)
				}
			}

			// The victim gang's members bound, holding a reservation;
			// the listing gang's member reaches Permit.
			for _, m := range victims {
				delete(h.waiting, m.UID)
				bound := m.DeepCopy()
				bound.Spec.NodeName = "node-b"
				if err := p.podIndex.Update(bound); err != nil {
					t.Fatal(err)
				}
			}
			p.nominateForTest("team-b/train")
			if st := permit(t, p, h, lister); st.IsSuccess() || st.Code() == fwk.Wait || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("Permit of the listing gang: %v, want refused with %q", st, tc.want)
			}
			if !p.jobs.Nominated("team-b/train") || p.satisfied["team-b/train"] {
				t.Errorf("the listing gang's Permit acted on team-b/train: nomination %v, satisfied %v",
					p.jobs.Nominated("team-b/train"), p.satisfied["team-b/train"])
			}
		})
	}
}

// TestMutualGroupStillActsTogether: gangs that list each other are one
// group: a failing member of one releases the waiting members of the
// other.
func TestMutualGroupStillActsTogether(t *testing.T) {
	groups := `["ps", "workers"]`
	ps := member("ml", "ps", 0, 1, groups)
	workers := []*corev1.Pod{member("ml", "workers", 0, 2, groups), member("ml", "workers", 1, 2, groups)}
	p, h := newTestPlugin(t, append(workers, ps))
	if st := p.PreEnqueue(context.Background(), ps); !st.IsSuccess() {
		t.Fatalf("PreEnqueue of a mutual group's member: %v", st)
	}
	for _, m := range workers {
		if st := permit(t, p, h, m); st.Code() != fwk.Wait {
			t.Fatalf("%s: %v, want Wait (ps not placed)", m.Name, st)
		}
	}
	p.Unreserve(context.Background(), nil, ps, "node-a")
	for _, m := range workers {
		if h.waiting[m.UID].rejected == "" {
			t.Errorf("%s not released with its group", m.Name)
		}
	}
}

// TestGroupWaitsForAGangNotCreatedYet: a listed gang with neither a
// PodGroup nor pods is waited for, not refused: gangs of one group are
// rarely created in the same instant.
func TestGroupWaitsForAGangNotCreatedYet(t *testing.T) {
	ps := member("ml", "ps", 0, 1, `["ps", "workers"]`)
	p, h := newTestPlugin(t, []*corev1.Pod{ps})
	st := p.PreEnqueue(context.Background(), ps)
	if want := "gang ml/workers has 0 of 1 pods"; st.IsSuccess() || !strings.Contains(st.Message(), want) {
		t.Errorf("PreEnqueue: %v, want to wait with %q", st, want)
	}
	// Its member in Permit is not let go on a gang it cannot read.
	if st, want := permit(t, p, h, ps), "gang ml/workers: PodGroup ml/workers not found"; st.Code() != fwk.Wait || !strings.Contains(st.Message(), want) {
		t.Errorf("Permit: %v, want Wait with %q", st, want)
	}
}
