package gang

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
)

// The bound counts a node's room with evictions only where an evicted
// unit ran, and its room without evictions elsewhere.
func TestRoomBound(t *testing.T) {
	b := &roomBound{
		want:      4,
		base:      map[string]int{"a": 0, "b": 0, "c": 1, "d": 0},
		all:       map[string]int{"a": 1, "b": 1, "c": 2, "d": 2},
		unitNodes: [][]string{{"a"}, {"b"}, {"d"}, {"a", "b"}},
	}
	for _, tc := range []struct {
		set  []int
		want bool
	}{
		{nil, false},               // 1
		{[]int{0, 1}, false},       // a, b, c: 1+1+1
		{[]int{2}, false},          // c, d: 1+2
		{[]int{0, 2}, true},        // a, c, d: 1+1+2
		{[]int{3, 2}, true},        // a, b, c, d: 1+1+1+2
		{[]int{0, 1, 2, 3}, true},  // every unit
		{[]int{3}, false},          // a, b, c
		{[]int{1, 1, 1, 1}, false}, // a unit counted once
	} {
		if got := b.enough(tc.set); got != tc.want {
			t.Errorf("enough(%v) = %v, want %v", tc.set, got, tc.want)
		}
	}
}

func TestNodeLocal(t *testing.T) {
	byName := func(values ...string) *corev1.NodeSelector {
		return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: values}}}}}
	}
	byLabel := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}}}}}
	for name, tc := range map[string]struct {
		sel  *corev1.NodeSelector
		want bool
	}{
		"one node":        {byName("gpu-0"), true},
		"two nodes":       {byName("gpu-0", "gpu-1"), false},
		"all nodes (nil)": {nil, false},
		"by label":        {byLabel, false},
	} {
		if got := nodeLocal(tc.sel); got != tc.want {
			t.Errorf("%s: nodeLocal = %v, want %v", name, got, tc.want)
		}
	}
}

// PostFilter's message follows PreFilter's in the pod's condition: what
// PreFilter said is not repeated.
func TestAfterPreFilter(t *testing.T) {
	why := "gang default/job: 4 pods do not fit in the cluster: 2 of 4 pods fit"
	for _, tc := range []struct{ msg, want string }{
		{why, ""},
		{why + "; evicting all 3 lower-priority jobs would not make room either, so nothing was evicted", "evicting all 3 lower-priority jobs would not make room either, so nothing was evicted"},
		{"gang default/job: waiting for 2 pods evicted for it to terminate", "gang default/job: waiting for 2 pods evicted for it to terminate"},
	} {
		st := afterPreFilter(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, tc.msg), why)
		if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != tc.want {
			t.Errorf("afterPreFilter(%q) = %v %q, want %q", tc.msg, st.Code(), st.Message(), tc.want)
		}
	}
}

// Room nominated to a gang is reserved against other gangs and pods of
// the same or lower priority (as kube-scheduler counts nominated pods of
// equal priority), not against higher priorities or the gang itself, and
// not after nominationTTL. Without equal priority, two gangs of one
// priority that preempt at once evict for the same room, and the one
// that loses the race backs off for the TTL.
func TestNominatedRoomReservedAgainstEqualPriority(t *testing.T) {
	p := &Plugin{nominations: map[string]*nomination{}}
	p.rebuild.Do(func() {}) // nothing to restore
	nom := newNomination(1000)
	nom.nodes["cpu-0"] = 2
	p.nominations["default/hp"] = nom
	stale := newNomination(1000)
	stale.nodes["cpu-1"] = 1
	stale.at = time.Now().Add(-nominationTTL - time.Second)
	p.nominations["default/old"] = stale
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
		if got := p.reservedFor("cpu-0", tc.prio, tc.gang); got != tc.want {
			t.Errorf("reservedFor(cpu-0, priority %d, gang %q) = %q, want %q", tc.prio, tc.gang, got, tc.want)
		}
		if got := p.reservedFor("cpu-1", tc.prio, tc.gang); got != "" {
			t.Errorf("reservedFor(cpu-1, priority %d) = %q after the TTL, want none", tc.prio, got)
		}
		got := p.reservedNodes(tc.prio, tc.gang)
		if want := tc.want != ""; got.Has("cpu-0") != want || got.Has("cpu-1") {
			t.Errorf("reservedNodes(priority %d, gang %q) = %v, want cpu-0: %v", tc.prio, tc.gang, sets.List(got), want)
		}
	}
}

// claimsHandle is a framework handle whose DRA manager knows only
// ResourceClaims.
type claimsHandle struct {
	fwk.Handle
	claims []*resourceapi.ResourceClaim
}

func (h claimsHandle) SharedDRAManager() fwk.SharedDRAManager { return claimsManager{claims: h.claims} }

type claimsManager struct {
	fwk.SharedDRAManager
	claims []*resourceapi.ResourceClaim
}

func (m claimsManager) ResourceClaims() fwk.ResourceClaimTracker {
	return claimsTracker{claims: m.claims}
}

type claimsTracker struct {
	fwk.ResourceClaimTracker
	claims []*resourceapi.ResourceClaim
}

func (t claimsTracker) List() ([]*resourceapi.ResourceClaim, error) { return t.claims, nil }

func (t claimsTracker) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	for _, c := range t.claims {
		if c.Namespace == namespace && c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("claim %s/%s not found", namespace, name)
}

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
		pods := append(annotatedGang("hp", 2, "30s"), other)
		if tc.victim != nil {
			pods = append(pods, tc.victim)
		}
		p, h := newTestPlugin(t, pods)
		p.handle = claimsHandle{Handle: h, claims: tc.claims}
		nom := newNomination(1000)
		nom.victims[victim] = types.NamespacedName{Namespace: "default", Name: "holder-0"}
		if tc.recorded != "" {
			nom.claims[types.NamespacedName{Namespace: "default", Name: tc.recorded}] = true
		}
		nom.nodes["h100-0"] = 2
		p.nominations["default/hp"] = nom
		p.failures["default/hp"] = failure{msg: "gang default/hp: 2 pods do not fit in the cluster: 1 of 2 pods fit", at: time.Now()}
		g := &gangSpec{key: "default/hp"}
		got := p.earlierPreemptionPending(context.Background(), g)
		if tc.want != given {
			if !strings.Contains(got, tc.want) || nom.spent || nom.nodes == nil || len(h.activated) != 0 {
				t.Errorf("%s: %q (room given back %v, nodes %v, members retried %v); want it to say %q and keep the room",
					name, got, nom.spent, nom.nodes, h.activated, tc.want)
			}
			continue
		}
		// The plan that failed may predate the release: the gang tries
		// once more, its failure no answer for the next member, before
		// the room is given back.
		if !strings.Contains(got, retry) || nom.spent || len(h.activated) != 2 || !p.failures["default/hp"].at.IsZero() {
			t.Errorf("%s: first look %q (room given back %v, members retried %v, failure at %v); want it to say %q, the members retried and the failure not reused",
				name, got, nom.spent, h.activated, p.failures["default/hp"].at, retry)
		}
		got = p.earlierPreemptionPending(context.Background(), g)
		if !strings.Contains(got, given) || !nom.spent || nom.nodes != nil {
			t.Errorf("%s: second look %q (room given back %v, nodes %v); want it to say %q and give the room back", name, got, nom.spent, nom.nodes, given)
		}
	}
}

// evictHandle is a framework handle with a clientset and a DRA manager
// that knows no claims; it counts activations, which may come from a
// timer.
type evictHandle struct {
	*fakeHandle
	cs          kubernetes.Interface
	snap        fwk.SharedLister
	mu          sync.Mutex
	activations int
}

func (h *evictHandle) ClientSet() kubernetes.Interface { return h.cs }

func (h *evictHandle) SharedDRAManager() fwk.SharedDRAManager { return claimsManager{} }

func (h *evictHandle) SnapshotSharedLister() fwk.SharedLister { return h.snap }

func (h *evictHandle) Activate(klog.Logger, map[string]*corev1.Pod) {
	h.mu.Lock()
	h.activations++
	h.mu.Unlock()
}

func (h *evictHandle) activated() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.activations
}

// A victim whose eviction the API refuses (an admission policy or webhook
// on pod deletes) stays bound and holds its room. The gang must not wait
// for it forever, nor lose the others for nothing: the deletes go first
// as a dry run, and while one is refused no victim is deleted; the
// eviction is tried again, the members woken to do so, and after
// evictTries the room is given up, the refused victim and the API's
// answer named, and nothing not evicted counted as a victim any more. A
// refusal that clears on a later try costs nothing; a delete refused
// after its dry run passed costs the victims already deleted.
func TestRefusedEvictionIsRetriedThenGivenUp(t *testing.T) {
	const refusal = `admission webhook "no-deletes" denied the request`
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
			calls:   evictTries, left: []string{"holder-0", "holder-1"},
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
			calls:   2 * evictTries, left: []string{"holder-0"},
			want: "could not evict default/holder-0 (evict victim default/holder-0: " + refusal + ") after 3 tries",
		},
	} {
		t.Run(name, func(t *testing.T) {
			stuck := len(tc.left) > 0
			var victims []*corev1.Pod
			for i := range 2 {
				name := fmt.Sprintf("holder-%d", i)
				victims = append(victims, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{NodeName: "h100-0"}})
			}
			cs := fake.NewClientset(victims[0], victims[1])
			var mu sync.Mutex
			calls := 0
			cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
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
			p, fh := newTestPlugin(t, append(annotatedGang("hp", 2, "30s"), victims...))
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h100-0"}}
			h := &evictHandle{fakeHandle: fh, cs: cs, snap: cache.NewSnapshot(victims, []*corev1.Node{node})}
			p.handle, p.evictRetry = h, 0
			nom := newNomination(1000)
			for _, v := range victims {
				p.addVictim(nom, v)
			}
			nom.nodes["h100-0"] = 2
			p.nominations["default/hp"] = nom
			p.failures["default/hp"] = failure{msg: "gang default/hp: 2 pods do not fit in the cluster", at: time.Now()}
			g := &gangSpec{key: "default/hp"}
			// observe shows the scheduler the victims the API has deleted,
			// as its informer and next snapshot would, and returns those
			// left.
			observe := func() []string {
				var left []string
				var bound []*corev1.Pod
				for _, v := range victims {
					if _, err := cs.CoreV1().Pods("default").Get(context.Background(), v.Name, metav1.GetOptions{}); err == nil {
						left = append(left, v.Name)
						bound = append(bound, v)
					} else if err := p.podIndex.Delete(v); err != nil {
						t.Fatal(err)
					}
				}
				h.snap = cache.NewSnapshot(bound, []*corev1.Node{node})
				return left
			}
			settle := func() {
				t.Helper()
				err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					p.mu.Lock()
					defer p.mu.Unlock()
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

			p.startEvictions(nom, victims)
			p.evictVictims(context.Background(), g.key, nom, victims)
			// The members are woken, and the failure that sent them to
			// PostFilter is no answer any more: otherwise they would not
			// get there again.
			if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				p.mu.Lock()
				defer p.mu.Unlock()
				return h.activated() > 0 && p.failures["default/hp"].at.IsZero(), nil
			}); err != nil {
				t.Fatal("a refused eviction did not send the gang's members round again")
			}
			if left := observe(); !stuck && len(left) != 2 {
				t.Fatalf("after a refused eviction %v left, want both victims: none is evicted while one is refused", left)
			}
			// Before the retry is due, the gang says what it waits for.
			p.evictRetry = time.Hour
			if got, want := p.earlierPreemptionPending(context.Background(), g), "could not evict default/holder-0 (evict victim default/holder-0: "+refusal+"); trying again at"; !strings.Contains(got, want) {
				t.Errorf("before the retry: %q, want it to say %q", got, want)
			}
			p.evictRetry = 0
			for try := 2; try <= evictTries; try++ {
				got := p.earlierPreemptionPending(context.Background(), g)
				if want := "evicting " + tc.retried + " again, the last try failed"; !strings.Contains(got, want) {
					t.Fatalf("try %d: %q, want it to say %q", try, got, want)
				}
				settle()
				if len(observe()) == 0 {
					break
				}
			}
			mu.Lock()
			if calls != tc.calls {
				t.Errorf("holder-0's deletes sent %d times, want %d", calls, tc.calls)
			}
			mu.Unlock()
			if left := observe(); !slices.Equal(left, tc.left) {
				t.Errorf("victims left %v, want %v", left, tc.left)
			}
			got := p.earlierPreemptionPending(context.Background(), g)
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
				if got := p.earlierPreemptionPending(context.Background(), g); !strings.Contains(got, "could not evict default/holder-0 (") || !strings.Contains(got, "not evicting again before") {
					t.Errorf("after giving up: %q, want the gang to back off, saying why, not wait for the victims", got)
				}
			}
		})
	}
}
