package jobpreempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
)

const refusal = `admission webhook "no-deletes" denied the request`

// victimsOn makes n bound victims holder-0… on node h100-0.
func victimsOn(n int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, pod(fmt.Sprintf("holder-%d", i), "", "h100-0"))
	}
	return out
}

// settle waits until no eviction of nom is in flight.
func settle(t *testing.T, j *Preemptor, nom *Nomination) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, e := range nom.evictions {
			if e.inFlight {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal("the eviction never ended")
	}
}

// A victim whose eviction the API refuses (an admission policy or webhook
// on pod deletes) stays bound and holds its room. The gang must not wait
// for it forever, nor lose the others for nothing: the deletes go first
// as a dry run, and while one is refused no victim is deleted; the
// eviction is tried again, the members woken to do so, and after
// EvictTries the room is given up, the refused victim and the API's
// answer named, and nothing not evicted counted as a victim any more. A
// refusal that clears on a later try costs nothing; a delete refused
// after its dry run passed costs the victims already deleted.
func TestRefusedEvictionIsRetriedThenGivenUp(t *testing.T) {
	for name, tc := range map[string]struct {
		// refuse says whether holder-0's n-th delete (from 1, dry runs
		// included) is refused.
		refuse  func(n int, dryRun bool) bool
		retried string // the victims tried again
		calls   int    // deletes of holder-0 sent, dry runs included
		left    []string
		want    string
	}{
		"refused every time": {
			refuse:  func(int, bool) bool { return true },
			retried: "default/holder-0, default/holder-1",
			calls:   EvictTries, left: []string{"holder-0", "holder-1"},
			want: "could not evict default/holder-0 (evict victim default/holder-0: " + refusal + ") after 3 tries",
		},
		"refused once, then let through": {
			refuse:  func(n int, _ bool) bool { return n == 1 },
			retried: "default/holder-0, default/holder-1",
			calls:   3, // refused, dry run, delete
			want:    "the pods evicted for it are gone; trying again in the room they left",
		},
		"delete refused after its dry run": {
			refuse:  func(_ int, dryRun bool) bool { return !dryRun },
			retried: "default/holder-0",
			calls:   2 * EvictTries, left: []string{"holder-0"},
			want: "could not evict default/holder-0 (evict victim default/holder-0: " + refusal + ") after 3 tries",
		},
	} {
		t.Run(name, func(t *testing.T) {
			stuck := len(tc.left) > 0
			victims := victimsOn(2)
			j, h := newTestPreemptor(t, nil, append(victims, pod("hp-0", "hp", ""), pod("hp-1", "hp", ""))...)
			var mu sync.Mutex
			calls := 0
			h.cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				d := a.(k8stesting.DeleteAction)
				dryRun := len(d.GetDeleteOptions().DryRun) > 0
				if d.GetName() == "holder-0" {
					calls++
					if tc.refuse(calls, dryRun) {
						return true, nil, errors.New(refusal)
					}
				}
				return dryRun, nil, nil // a dry run deletes nothing
			})
			j.retryAfter = 0
			nom := NewNomination(1000, map[string]int{"h100-0": 2})
			for _, v := range victims {
				j.AddVictim(nom, v)
			}
			j.Set("default/hp", nom)
			// left returns the victims the API still holds.
			left := func() []string {
				h.observe(t)
				var out []string
				for _, v := range victims {
					if _, err := j.pods.Pods("default").Get(v.Name); err == nil {
						out = append(out, v.Name)
					}
				}
				return out
			}

			j.startEvictions(nom, victims)
			j.evictVictims(context.Background(), "default/hp", nom, victims)
			// The members are woken: nothing else would send them to
			// PostFilter again.
			if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return h.retries() > 0, nil
			}); err != nil {
				t.Fatal("a refused eviction did not send the gang's members round again")
			}
			if l := left(); !stuck && len(l) != 2 {
				t.Fatalf("after a refused eviction %v left, want both victims: none is evicted while one is refused", l)
			}
			// Before the retry is due, the gang says what it waits for.
			j.retryAfter = time.Hour
			if got, want := j.Pending(context.Background(), "default/hp"), "could not evict default/holder-0 (evict victim default/holder-0: "+refusal+"); trying again at"; !strings.Contains(got, want) {
				t.Errorf("before the retry: %q, want it to say %q", got, want)
			}
			j.retryAfter = 0
			for try := 2; try <= EvictTries; try++ {
				got := j.Pending(context.Background(), "default/hp")
				if want := "evicting " + tc.retried + " again, the last try failed"; !strings.Contains(got, want) {
					t.Fatalf("try %d: %q, want it to say %q", try, got, want)
				}
				settle(t, j, nom)
				if len(left()) == 0 {
					break
				}
			}
			mu.Lock()
			if calls != tc.calls {
				t.Errorf("holder-0's deletes sent %d times, want %d", calls, tc.calls)
			}
			mu.Unlock()
			if l := left(); !slices.Equal(l, tc.left) {
				t.Errorf("victims left %v, want %v", l, tc.left)
			}
			got := j.Pending(context.Background(), "default/hp")
			if !strings.Contains(got, tc.want) || strings.Contains(got, "holder-1") {
				t.Errorf("%q, want it to say %q and not name holder-1, which was not refused", got, tc.want)
			}
			for _, name := range tc.left {
				if _, still := nom.victims[types.UID(name)]; still {
					t.Errorf("%s, not evicted, still counted as a victim", name)
				}
			}
			if nom.spent != stuck {
				t.Errorf("room given back: %v, want %v", nom.spent, stuck)
			}
			if stuck {
				// The gang no longer waits for the pods it could not
				// evict, and goes on saying why.
				if got := j.Pending(context.Background(), "default/hp"); !strings.Contains(got, "could not evict default/holder-0 (") || !strings.Contains(got, "not evicting again before") {
					t.Errorf("after giving up: %q, want the gang to back off, saying why, not wait for the victims", got)
				}
			}
		})
	}
}

// A dry run refused for one victim holds every victim back: no delete
// and no DisruptionTarget is written for any of them, the refused one
// carries the API's answer and the others errHeldBack, and the gang is
// sent round again after the retry interval to try again.
func TestDryRunRefusedHoldsBackAll(t *testing.T) {
	victims := victimsOn(3)
	j, h := newTestPreemptor(t, nil, victims...)
	var mu sync.Mutex
	var writes []string
	h.cs.PrependReactor("*", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := a.(k8stesting.DeleteAction); ok {
			if len(d.GetDeleteOptions().DryRun) > 0 {
				if d.GetName() == "holder-1" {
					return true, nil, errors.New(refusal)
				}
				return true, nil, nil
			}
		}
		if a.GetVerb() == "delete" || a.GetVerb() == "patch" {
			writes = append(writes, a.GetVerb())
		}
		return false, nil, nil
	})
	j.retryAfter = 10 * time.Millisecond
	nom := NewNomination(1000, map[string]int{"h100-0": 3})
	for _, v := range victims {
		j.AddVictim(nom, v)
	}
	j.Set("default/hp", nom)
	j.startEvictions(nom, victims)
	j.evictVictims(context.Background(), "default/hp", nom, victims)
	mu.Lock()
	if len(writes) != 0 {
		t.Errorf("API writes %v made while a dry run was refused, want none", writes)
	}
	mu.Unlock()
	got := map[string]string{}
	for uid, e := range nom.evictions {
		if e.inFlight || e.tries != 1 {
			t.Errorf("%s: in flight %v, tries %d; want the try over, once", uid, e.inFlight, e.tries)
		}
		got[string(uid)] = fmt.Sprint(e.err)
	}
	want := map[string]string{"holder-0": errHeldBack.Error(), "holder-1": "evict victim default/holder-1: " + refusal, "holder-2": errHeldBack.Error()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("how each eviction ended (-want +got):\n%s", diff)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.retries() == 1, nil
	}); err != nil {
		t.Errorf("the gang was sent round %d times after the refusal, want once", h.retries())
	}
}

// failedEvictions sorts the victims by where their last eviction stands:
// in flight, done, or gone (or going, or another pod now) count for
// nothing; one refused EvictTries times is stuck; one held back or
// refused is tried again once the retry interval has passed; before
// that, a refused one is waited for (and named, with when), a held-back
// one just waits. Every one still there and not evicted is notEvicted.
func TestFailedEvictionsTransitions(t *testing.T) {
	const retry = time.Minute
	refused := errors.New(refusal)
	unreachable := apierrors.NewServiceUnavailable("the API server is restarting")
	long, now := time.Now().Add(-2*retry), time.Now()
	terminating := pod("terminating", "", "h100-0")
	terminating.DeletionTimestamp = &metav1.Time{Time: now}
	replaced := pod("replaced", "", "h100-0")
	replaced.UID = "replaced-2"
	pods := []*corev1.Pod{pod("in-flight", "", "h100-0"), pod("done", "", "h100-0"), pod("stuck", "", "h100-0"),
		pod("refused-old", "", "h100-0"), pod("refused-new", "", "h100-0"), pod("held-old", "", "h100-0"),
		pod("held-new", "", "h100-0"), pod("unreachable", "", "h100-0"), pod("unreachable-long", "", "h100-0"), terminating, replaced}
	j, _ := newTestPreemptor(t, nil, pods...)
	j.retryAfter = retry
	nom := NewNomination(1000, nil)
	for _, p := range append(pods, pod("gone", "", "h100-0")) {
		nom.victims[types.UID(p.Name)] = types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	}
	nom.evictions = map[types.UID]*eviction{
		"in-flight":   {tries: 1, inFlight: true, err: refused, at: long},
		"done":        {tries: 1, at: long},
		"stuck":       {tries: EvictTries + 1, refused: EvictTries, at: now, err: refused},
		"refused-old": {tries: 1, refused: 1, at: long, err: refused},
		"refused-new": {tries: 2, refused: 2, at: now, err: refused},
		// Unanswered tries are no refusals: tried again however many,
		// given up once they have failed for NominationTTL.
		"unreachable":      {tries: 2 * EvictTries, at: long, err: unreachable, failingSince: now.Add(-NominationTTL / 2)},
		"unreachable-long": {tries: 2 * EvictTries, at: now, err: unreachable, failingSince: now.Add(-NominationTTL)},
		"held-old":         {tries: 1, at: long, err: errHeldBack},
		"held-new":         {tries: 1, at: now, err: errHeldBack},
		"terminating":      {tries: 1, at: long, err: refused},
		"replaced":         {tries: 1, at: long, err: refused},
		"gone":             {tries: 1, at: long, err: refused},
	}
	fe := j.failedEvictions(nom)
	var again []string
	for _, v := range fe.again {
		again = append(again, v.Name)
	}
	if diff := cmp.Diff([]string{"held-old", "refused-old", "unreachable"}, again); diff != "" {
		t.Errorf("evicted again (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"default/stuck (" + refusal + ") after 3 tries", "default/unreachable-long (" + unreachable.Error() + ") for 5m0s"}, fe.stuck); diff != "" {
		t.Errorf("stuck (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"default/refused-new (" + refusal + ")"}, fe.waiting); diff != "" {
		t.Errorf("waited for (-want +got):\n%s", diff)
	}
	if d := fe.next.Sub(now.Add(retry)); d < -time.Second || d > time.Second {
		t.Errorf("next try at %v, want the retry interval after the last refusal", fe.next)
	}
	notEvicted := make([]string, len(fe.notEvicted))
	for i, uid := range fe.notEvicted {
		notEvicted[i] = string(uid)
	}
	slices.Sort(notEvicted)
	if diff := cmp.Diff([]string{"held-new", "held-old", "refused-new", "refused-old", "stuck", "unreachable", "unreachable-long"}, notEvicted); diff != "" {
		t.Errorf("not evicted (-want +got):\n%s", diff)
	}
}

// Once its victims are gone and their claims released, a gang is sent
// round once more on that room (freed); if it still does not fit, the
// room is given back (spent): its nodes reserved no more, the members'
// nominated nodes queued to be cleared, and nothing evicted again for
// NominationTTL, after which the nomination is dropped.
func TestFreedThenSpentThenForgotten(t *testing.T) {
	member := pod("hp-0", "hp", "")
	member.Status.NominatedNodeName = "h100-0"
	j, h := newTestPreemptor(t, nil, member, pod("hp-1", "hp", ""))
	nom := NewNomination(1000, map[string]int{"h100-0": 2})
	nom.victims["holder-0"] = types.NamespacedName{Namespace: "default", Name: "holder-0"}
	j.Set("default/hp", nom)

	ctx := context.Background()
	if got := j.Pending(ctx, "default/hp"); !strings.Contains(got, "trying again in the room they left") || !nom.freed || h.retries() != 1 {
		t.Fatalf("victims gone: %q (freed %v, retried %d); want one more try", got, nom.freed, h.retries())
	}
	if j.ReservedFor("h100-0", 1000, "") != "default/hp" {
		t.Error("the room is not kept for the gang's try")
	}
	if got := j.Pending(ctx, "default/hp"); !strings.Contains(got, "could not be used; nominations cleared") || !nom.spent || h.retries() != 1 {
		t.Fatalf("second look: %q (spent %v, retried %d); want the room given back", got, nom.spent, h.retries())
	}
	if j.ReservedFor("h100-0", 0, "") != "" {
		t.Error("room given back is still reserved")
	}
	if got := j.writer.queue.Len(); got != 1 {
		t.Errorf("%d nominations queued to be cleared, want 1 (the member nominated)", got)
	}
	if got := j.Pending(ctx, "default/hp"); !strings.Contains(got, "not evicting again before") {
		t.Errorf("within the TTL: %q, want the gang to back off", got)
	}
	j.mu.Lock()
	nom.at = time.Now().Add(-NominationTTL)
	j.mu.Unlock()
	if got := j.Pending(ctx, "default/hp"); got != "" || j.Nominated("default/hp") {
		t.Errorf("after the TTL: %q (nominated %v), want the gang free to preempt again", got, j.Nominated("default/hp"))
	}
}

// Only an answer from the API that turns the delete down is a refusal;
// a delete that got no answer, or an overloaded or failing server's,
// says nothing about the victim and is just tried again.
func TestTransientFailures(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	refused := &url.Error{Op: "Delete", URL: "https://api/pods/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	for err, want := range map[error]bool{
		refused:                                                          true,
		fmt.Errorf("evict victim: %w", refused):                          true,
		apierrors.NewTooManyRequests("slow", 1):                          true,
		apierrors.NewServiceUnavailable("down"):                          true,
		apierrors.NewInternalError(errors.New("webhook failed")):         true,
		apierrors.NewTimeoutError("slow", 1):                             true,
		context.DeadlineExceeded:                                         true,
		io.ErrUnexpectedEOF:                                              true,
		apierrors.NewForbidden(gr, "x", errors.New("RBAC")):              false,
		fmt.Errorf("evict victim: %w", apierrors.NewBadRequest(refusal)): false,
		apierrors.NewConflict(gr, "x", errors.New("UID precondition")):   false,
		errors.New(refusal):                                              false,
	} {
		if got := transient(err); got != want {
			t.Errorf("transient(%v) = %v, want %v", err, got, want)
		}
	}
}
