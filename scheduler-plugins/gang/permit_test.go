package gang

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// fakeHandle is the part of the scheduler framework the gang's Permit,
// Reserve and PreEnqueue paths use: the waiting pods and the queue.
type fakeHandle struct {
	fwk.Handle
	waiting   map[types.UID]*fakeWaitingPod
	activated []string
}

func (h *fakeHandle) IterateOverWaitingPods(f func(fwk.WaitingPod)) {
	for _, wp := range h.waiting {
		f(wp)
	}
}

func (h *fakeHandle) GetWaitingPod(uid types.UID) fwk.WaitingPod {
	if wp, ok := h.waiting[uid]; ok {
		return wp
	}
	return nil
}

func (h *fakeHandle) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	for k := range pods {
		h.activated = append(h.activated, k)
	}
}

// fakeWaitingPod records what the plugin decided. Like the framework's,
// it stays in the waiting map until the test removes it: a rejected pod
// can still be seen there for a moment.
type fakeWaitingPod struct {
	fwk.WaitingPod
	pod      *corev1.Pod
	allowed  bool
	rejected string
}

func (w *fakeWaitingPod) GetPod() *corev1.Pod { return w.pod }
func (w *fakeWaitingPod) Allow(string)        { w.allowed = true }
func (w *fakeWaitingPod) Reject(_, msg string) bool {
	w.rejected = msg
	return true
}

// annotatedGang makes n members of a gang declared on pods alone, with
// minMember n and the given Permit timeout.
func annotatedGang(name string, n int, timeout string) []*corev1.Pod {
	var out []*corev1.Pod
	for i := 0; i < n; i++ {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: fmt.Sprintf("%s-%d", name, i), UID: types.UID(fmt.Sprintf("%s-%d", name, i)),
			Annotations: map[string]string{
				AnnotationPrefix + KeyName: name, AnnotationPrefix + KeyMinAvailable: fmt.Sprint(n), AnnotationPrefix + KeyWaitingTime: timeout,
			},
		}})
	}
	return out
}

// newTestPlugin builds the plugin over a fake handle and a pod index.
func newTestPlugin(t testing.TB, pods []*corev1.Pod) (*Plugin, *fakeHandle) {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{gangIndex: func(obj any) ([]string, error) {
		if k := gangKeyOf(obj.(*corev1.Pod)); k != "" {
			return []string{k}, nil
		}
		return nil, nil
	}})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	h := &fakeHandle{waiting: map[types.UID]*fakeWaitingPod{}}
	p := &Plugin{
		handle: h, pods: corelisters.NewPodLister(idx), podIndex: idx, src: &sources{podGroups: emptyLister{}},
		status: makeStatusWriter(nil, nil, statusRateLimiter()),
		plans:  map[string]*plan{}, failures: map[string]failure{}, satisfied: map[string]bool{},
		gen: map[string]uint64{}, waitGen: map[types.UID]uint64{}, allowed: map[types.UID]string{}, sortCache: map[string]sortEntry{},
	}
	p.jobs = newPreemptor(p)
	return p, h
}

// emptyLister is a PodGroup lister with no PodGroups.
type emptyLister struct{ cache.GenericLister }

func (emptyLister) ByNamespace(string) cache.GenericNamespaceLister { return emptyNS{} }

type emptyNS struct{ cache.GenericNamespaceLister }

func (emptyNS) Get(name string) (runtime.Object, error) { return nil, fmt.Errorf("%s not found", name) }

// permit runs Permit for a member; a member told to wait joins the
// waiting pods, as in the framework.
func permit(t *testing.T, p *Plugin, h *fakeHandle, pod *corev1.Pod) *fwk.Status {
	t.Helper()
	st, _ := p.Permit(context.Background(), nil, pod, "node-a")
	if st.Code() == fwk.Wait {
		h.waiting[pod.UID] = &fakeWaitingPod{pod: pod}
	}
	return st
}

// TestRejectedMembersDoNotReleaseTheNextRound: the plugin releases a
// round and rejects its waiting members; their Unreserve comes later,
// from the binding cycles, when the next round may have begun. It must
// not release that round: only a member that fails in its own round
// does.
func TestRejectedMembersDoNotReleaseTheNextRound(t *testing.T) {
	pods := annotatedGang("job", 3, "1h")
	p, h := newTestPlugin(t, pods)
	for _, m := range pods[:2] {
		if st := permit(t, p, h, m); st.Code() != fwk.Wait {
			t.Fatalf("%s: %v, want Wait", m.Name, st)
		}
	}
	p.releaseGroup(p.gangOf(pods[0]), "member job-2 could not be placed")
	for _, m := range pods[:2] {
		delete(h.waiting, m.UID) // the framework drops them
	}
	if st := permit(t, p, h, pods[2]); st.Code() != fwk.Wait {
		t.Fatalf("job-2 in the next round: %v, want Wait", st)
	}
	for _, m := range pods[:2] {
		p.Unreserve(context.Background(), nil, m, "node-a")
	}
	if r := h.waiting[pods[2].UID].rejected; r != "" {
		t.Errorf("job-2 rejected by the Unreserve of a member of the round before: %q", r)
	}
	if len(p.rejected) != 0 {
		t.Errorf("rejections left behind: %v", p.rejected)
	}
	// A member that fails in the current round still releases it.
	p.Unreserve(context.Background(), nil, pods[0], "node-a")
	if h.waiting[pods[2].UID].rejected == "" {
		t.Error("a member that failed in the current round did not release it")
	}
}

// TestPermitNeverLetsAPartialGangGo: two of three members wait; the gang
// is released (a member timed out or was rejected) but the framework
// still lists the rejected members as waiting when the third arrives. The
// third must wait in a new round, and nobody is allowed.
func TestPermitNeverLetsAPartialGangGo(t *testing.T) {
	pods := annotatedGang("job", 3, "1h")
	p, h := newTestPlugin(t, pods)
	for _, m := range pods[:2] {
		if st := permit(t, p, h, m); st.Code() != fwk.Wait {
			t.Fatalf("%s: %v, want Wait", m.Name, st)
		}
	}
	p.releaseGroup(p.gangOf(pods[0]), "member job-0 timed out")
	for _, m := range pods[:2] {
		if h.waiting[m.UID].rejected == "" {
			t.Errorf("%s was not rejected by the release", m.Name)
		}
	}
	if st := permit(t, p, h, pods[2]); st.Code() != fwk.Wait {
		t.Fatalf("last member after a release: %v, want Wait (the others were rejected)", st)
	}
	for _, wp := range h.waiting {
		if wp.allowed {
			t.Errorf("%s allowed although its gang was released", wp.pod.Name)
		}
	}
}

// TestPermitLetsAWholeGangGoAndBindFailuresStayAlone: three members
// arrive; the third lets the two waiting go. One of them then fails to
// bind: the others are not rejected, and nothing is left behind for it.
func TestPermitLetsAWholeGangGoAndBindFailuresStayAlone(t *testing.T) {
	pods := annotatedGang("job", 3, "1h")
	p, h := newTestPlugin(t, pods)
	permit(t, p, h, pods[0])
	permit(t, p, h, pods[1])
	if st := permit(t, p, h, pods[2]); !st.IsSuccess() {
		t.Fatalf("last member: %v, want Success", st)
	}
	for _, m := range pods[:2] {
		if wp := h.waiting[m.UID]; !wp.allowed || wp.rejected != "" {
			t.Errorf("%s: allowed %v, rejected %q; want allowed", m.Name, wp.allowed, wp.rejected)
		}
		delete(h.waiting, m.UID) // bound
	}
	p.Unreserve(context.Background(), nil, pods[1], "node-a")
	p.PostBind(context.Background(), nil, pods[0], "node-a")
	p.PostBind(context.Background(), nil, pods[2], "node-a")
	if len(p.allowed) != 0 || len(p.waitGen) != 0 {
		t.Errorf("state left behind: allowed %v, waitGen %v", p.allowed, p.waitGen)
	}
}

// TestPermitTimeoutReleasesOnlyItsRound: a member's own timer releases
// the gang while the round it waited in is current, and does nothing once
// that round ended.
func TestPermitTimeoutReleasesOnlyItsRound(t *testing.T) {
	pods := annotatedGang("job", 2, "50ms")
	p, h := newTestPlugin(t, pods)
	permit(t, p, h, pods[0])
	rejected := func() string {
		p.mu.Lock() // the timer rejects under the plugin's lock
		defer p.mu.Unlock()
		return h.waiting[pods[0].UID].rejected
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return rejected() != "", nil
	}); err != nil {
		t.Fatal("the member's timeout did not release the gang")
	}
	// A new round in which both arrive; a timer of the round before fires
	// late.
	p.mu.Lock()
	delete(h.waiting, pods[0].UID)
	stale := p.gen["default/job"] - 1
	p.mu.Unlock()
	permit(t, p, h, pods[0])
	p.mu.Lock()
	current := p.gen["default/job"]
	p.mu.Unlock()
	p.releaseRound(p.gangOf(pods[0]), stale, "late timer")
	if r := rejected(); r != "" {
		t.Errorf("a timer of an ended round rejected a member of the current one: %q", r)
	}
	if st := permit(t, p, h, pods[1]); !st.IsSuccess() {
		t.Fatalf("current round: %v", st)
	}
	p.releaseRound(p.gangOf(pods[0]), current, "timer of the round that just succeeded")
	if r := rejected(); r != "" {
		t.Errorf("a timer fired after the gang was let go rejected an allowed member: %q", r)
	}
}

// TestGangStateGoesWithItsPods: once a gang's last pod is gone, nothing
// of it is kept.
func TestGangStateGoesWithItsPods(t *testing.T) {
	pods := annotatedGang("job", 2, "1h")
	p, h := newTestPlugin(t, pods)
	permit(t, p, h, pods[0])
	permit(t, p, h, pods[1])
	p.failures["default/job"] = failure{msg: "old"}
	p.nominateForTest("default/job")
	for _, m := range pods {
		if err := p.podIndex.Delete(m); err != nil {
			t.Fatal(err)
		}
		p.forgetPod(m.UID)
	}
	p.forgetGang("default/job")
	if len(p.plans)+len(p.failures)+len(p.satisfied)+len(p.jobs.Gangs())+len(p.gen)+len(p.allowed)+len(p.waitGen) != 0 {
		t.Errorf("state left: plans %v failures %v satisfied %v nominations %v gen %v allowed %v waitGen %v",
			p.plans, p.failures, p.satisfied, p.jobs.Gangs(), p.gen, p.allowed, p.waitGen)
	}
}
