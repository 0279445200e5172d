package gang

import (
	"context"
	"errors"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

func testPodGroup(name string, uid types.UID, conds ...metav1.Condition) *schedulingv1alpha1.PodGroup {
	pg := &schedulingv1alpha1.PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid},
	}
	pg.Status.Conditions = conds
	return pg
}

func toUnstructured(t *testing.T, pg *schedulingv1alpha1.PodGroup) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pg)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// newStatusTest returns a fake API holding the PodGroups and a writer
// over it whose retries are fast. Workers are not started.
func newStatusTest(t *testing.T, pgs ...*schedulingv1alpha1.PodGroup) (context.Context, *dynamicfake.FakeDynamicClient, *statusWriter) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	var objs []runtime.Object
	for _, pg := range pgs {
		objs = append(objs, toUnstructured(t, pg))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		podGroupsGVR: "PodGroupList", topologiesGVR: "ClusterNetworkTopologyList"}, objs...)
	// The fake's own apply does not handle unstructured objects: the
	// scheduler's apply owns the conditions it sends, so they replace
	// the PodGroup's.
	dyn.PrependReactor("patch", "podgroups", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType || p.GetSubresource() != "status" {
			return false, nil, nil
		}
		patch := &unstructured.Unstructured{}
		if err := patch.UnmarshalJSON(p.GetPatch()); err != nil {
			return true, nil, err
		}
		obj, err := dyn.Tracker().Get(podGroupsGVR, p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		u := obj.(*unstructured.Unstructured).DeepCopy()
		conds, _, _ := unstructured.NestedSlice(patch.Object, "status", "conditions")
		if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
			return true, nil, err
		}
		return true, u, dyn.Tracker().Update(podGroupsGVR, u, p.GetNamespace())
	})
	w := makeStatusWriter(newSources(ctx, dyn), nil, workqueue.NewTypedItemExponentialFailureRateLimiter[podGroupKey](time.Millisecond, 20*time.Millisecond))
	return ctx, dyn, w
}

// start runs the writer's workers until the test ends, and checks that
// they stop.
func start(t *testing.T, ctx context.Context, w *statusWriter) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.run(ctx, 2); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("status writer did not stop")
		}
	})
}

// drain writes what is queued, one PodGroup at a time.
func drain(ctx context.Context, w *statusWriter) {
	for w.queue.Len() > 0 {
		w.processNext(ctx)
	}
}

// scheduledCondition is the PodGroup's Scheduled condition in the API.
func scheduledCondition(t *testing.T, ctx context.Context, dyn *dynamicfake.FakeDynamicClient, name string) (types.UID, *metav1.Condition) {
	t.Helper()
	obj, err := dyn.Resource(podGroupsGVR).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pg := &schedulingv1alpha1.PodGroup{}
	if err := fromUnstructured(obj, pg); err != nil {
		t.Fatal(err)
	}
	return pg.UID, meta.FindStatusCondition(pg.Status.Conditions, schedulingv1alpha1.ConditionScheduled)
}

// waitForMessage waits until the PodGroup shows the message.
func waitForMessage(t *testing.T, ctx context.Context, dyn *dynamicfake.FakeDynamicClient, name, msg string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if _, c := scheduledCondition(t, ctx, dyn, name); c != nil {
			last = c.Message
		}
		return last == msg, nil
	})
	if err != nil {
		t.Fatalf("PodGroup %s shows %q, want %q", name, last, msg)
	}
}

// recordWrites records the message of every status write that reaches
// the API, by PodGroup name.
func recordWrites(dyn *dynamicfake.FakeDynamicClient) func() map[string][]string {
	var mu sync.Mutex
	writes := map[string][]string{}
	dyn.PrependReactor("patch", "podgroups", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(p.GetPatch()); err != nil {
			return true, nil, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		msg := ""
		if len(conds) > 0 {
			msg, _, _ = unstructured.NestedString(conds[0].(map[string]any), "message")
		}
		mu.Lock()
		writes[p.GetName()] = append(writes[p.GetName()], msg)
		mu.Unlock()
		return false, nil, nil
	})
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(writes)
	}
}

// TestStatusWriterFollowsWhatItSent: the PodGroup from the lister may lag.
// A message the lister still shows must be written again when something
// else was wanted since, and an unchanged message is written once.
func TestStatusWriterFollowsWhatItSent(t *testing.T) {
	stale := testPodGroup("job", "uid-1", metav1.Condition{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: ReasonUnschedulable, Message: "no room"})
	ctx, dyn, w := newStatusTest(t, stale)
	writes := recordWrites(dyn)
	g := &gangSpec{key: "default/job", podGroup: stale}

	for _, send := range []func(){
		func() { w.unschedulable(g, "no room") },           // the lister already shows it
		func() { w.unschedulable(g, "no room; evicting") }, // a change
		func() { w.unschedulable(g, "no room; evicting") }, // unchanged
		func() { w.unschedulable(g, "no room") },           // back: the lister's copy is stale
		func() { w.scheduled(g) },
	} {
		send()
		drain(ctx, w)
	}
	want := map[string][]string{"job": {"no room; evicting", "no room", "all members placed"}}
	if diff := cmp.Diff(want, writes()); diff != "" {
		t.Errorf("conditions written (-want +got):\n%s", diff)
	}
}

// TestStatusWriterRetriesFailedWrites: an API that refuses the writes for
// a while delays the condition; the PodGroup ends up showing the last one
// the scheduler wanted.
func TestStatusWriterRetriesFailedWrites(t *testing.T) {
	ctx, dyn, w := newStatusTest(t, testPodGroup("job", "uid-1"))
	var failures atomic.Int32
	failures.Store(3)
	dyn.PrependReactor("patch", "podgroups", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failures.Add(-1) >= 0 {
			return true, nil, errors.New("etcd is down")
		}
		return false, nil, nil
	})
	g := &gangSpec{key: "default/job", podGroup: testPodGroup("job", "uid-1")}
	start(t, ctx, w)

	w.unschedulable(g, "no room")
	waitForMessage(t, ctx, dyn, "job", "no room")
	failures.Store(5)
	w.scheduled(g)
	waitForMessage(t, ctx, dyn, "job", "all members placed")
	if _, c := scheduledCondition(t, ctx, dyn, "job"); c.Status != metav1.ConditionTrue || c.Reason != ReasonScheduled {
		t.Errorf("Scheduled condition is %s/%s, want True/%s", c.Status, c.Reason, ReasonScheduled)
	}
}

// TestStatusWriterKeepsTheLastStatePerPodGroup: while the API is stuck,
// many changes pile up; each PodGroup is then written with its last one,
// and not with every one in between.
func TestStatusWriterKeepsTheLastStatePerPodGroup(t *testing.T) {
	const groups, changes = 5, 100
	var pgs []*schedulingv1alpha1.PodGroup
	for i := range groups {
		pgs = append(pgs, testPodGroup(fmt.Sprintf("job-%d", i), types.UID(fmt.Sprintf("uid-%d", i))))
	}
	ctx, dyn, w := newStatusTest(t, pgs...)
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	writes := recordWrites(dyn)
	dyn.PrependReactor("patch", "podgroups", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-gate
		return false, nil, nil
	})
	start(t, ctx, w)

	for i := range changes {
		for _, pg := range pgs {
			w.unschedulable(&gangSpec{podGroup: pg}, fmt.Sprintf("attempt %d", i))
		}
	}
	release()
	for _, pg := range pgs {
		waitForMessage(t, ctx, dyn, pg.Name, fmt.Sprintf("attempt %d", changes-1))
	}
	for name, msgs := range writes() {
		// One write may have been under way when the API got stuck.
		if len(msgs) > 2 {
			t.Errorf("PodGroup %s written %d times, want at most 2: %q", name, len(msgs), msgs)
		}
	}
}

// TestStatusWriterDoesNotWriteARecreatedPodGroup: a PodGroup deleted and
// created again under its name is a new gang; the old one's condition
// must not end up on it.
func TestStatusWriterDoesNotWriteARecreatedPodGroup(t *testing.T) {
	recreate := func(t *testing.T, tracker clienttesting.ObjectTracker) {
		if err := tracker.Delete(podGroupsGVR, "default", "job"); err != nil {
			t.Error(err)
		}
		if err := tracker.Add(toUnstructured(t, testPodGroup("job", "uid-2"))); err != nil {
			t.Error(err)
		}
	}
	t.Run("before the write", func(t *testing.T) {
		ctx, dyn, w := newStatusTest(t, testPodGroup("job", "uid-1"))
		writes := recordWrites(dyn)
		w.unschedulable(&gangSpec{podGroup: testPodGroup("job", "uid-1")}, "no room")
		recreate(t, dyn.Tracker())
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			pg := w.src.podGroup("default", "job")
			return pg != nil && pg.UID == "uid-2", nil
		}); err != nil {
			t.Fatal("the informer did not see the new PodGroup")
		}
		drain(ctx, w)
		if uid, c := scheduledCondition(t, ctx, dyn, "job"); c != nil {
			t.Errorf("PodGroup %s shows %q of the deleted one", uid, c.Message)
		}
		if got := writes(); len(got) != 0 {
			t.Errorf("writes %q, want none", got)
		}
	})
	t.Run("during the write", func(t *testing.T) {
		ctx, dyn, w := newStatusTest(t, testPodGroup("job", "uid-1"))
		writes := recordWrites(dyn)
		var once sync.Once
		dyn.PrependReactor("patch", "podgroups", func(clienttesting.Action) (bool, runtime.Object, error) {
			once.Do(func() { recreate(t, dyn.Tracker()) })
			return false, nil, nil
		})
		w.unschedulable(&gangSpec{podGroup: testPodGroup("job", "uid-1")}, "no room")
		start(t, ctx, w)
		// The write meant for uid-1 reaches uid-2, and is taken back.
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return len(writes()["job"]) >= 2, nil
		})
		if uid, c := scheduledCondition(t, ctx, dyn, "job"); err != nil || c != nil {
			t.Errorf("PodGroup %s shows %v of the deleted one (writes %q)", uid, c, writes())
		}
	})
}

// TestStatusWriterDoesNotOverwriteALaterCondition: a condition decided
// before the PodGroup got another one (a standby's plugin sees pods reach
// its queue too and decides they wait; the leader then lets the gang go)
// is not written over it, while one decided after is.
func TestStatusWriterDoesNotOverwriteALaterCondition(t *testing.T) {
	pg := testPodGroup("job", "uid-1")
	ctx, dyn, w := newStatusTest(t, pg)
	writes := recordWrites(dyn)
	g := &gangSpec{key: "default/job", podGroup: pg}
	w.waiting(g, nil, ReasonWaitingForMembers, "gang default/job has 1 of 2 pods; waiting for 1 more member")

	// The leader's condition, decided later, reaches the PodGroup first.
	later := pg.DeepCopy()
	later.Status.Conditions = []metav1.Condition{{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue,
		Reason: ReasonScheduled, Message: "all members placed", LastTransitionTime: metav1.NewTime(time.Now().Add(2 * time.Second))}}
	if _, err := dyn.Resource(podGroupsGVR).Namespace("default").Update(ctx, toUnstructured(t, later), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got := w.src.podGroup("default", "job")
		return got != nil && len(got.Status.Conditions) == 1, nil
	}); err != nil {
		t.Fatal("the informer never showed the leader's condition")
	}
	drain(ctx, w)
	if _, c := scheduledCondition(t, ctx, dyn, "job"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Scheduled condition %+v, want the leader's True kept", c)
	}
	if got := writes()["job"]; len(got) != 0 {
		t.Errorf("writes %q over a later condition, want none", got)
	}

	// A condition decided after the PodGroup's is written.
	earlier := later.DeepCopy()
	earlier.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-10 * time.Second))
	if _, err := dyn.Resource(podGroupsGVR).Namespace("default").Update(ctx, toUnstructured(t, earlier), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got := w.src.podGroup("default", "job")
		return got != nil && got.Status.Conditions[0].LastTransitionTime.Time.Before(time.Now().Add(-5*time.Second)), nil
	}); err != nil {
		t.Fatal("the informer never showed the older condition")
	}
	w.unschedulable(g, "member job-1 was deleted")
	drain(ctx, w)
	if got := writes()["job"]; !slices.Equal(got, []string{"member job-1 was deleted"}) {
		t.Errorf("writes %q, want the new condition", got)
	}
}

// TestStaleScheduledIsRetracted: a PodGroup says Scheduled=True ("all
// members placed"), but none of its two members is bound: the scheduler
// that let the gang go stopped before they bound, or the job replaced
// its pods. When a member is scheduled again, the condition is taken
// back; it stays when this scheduler let the gang go itself (binding is
// under way) or when minMember members are bound.
func TestStaleScheduledIsRetracted(t *testing.T) {
	placed := metav1.Condition{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: ReasonScheduled, Message: "all members placed"}
	for name, tc := range map[string]struct {
		bound     int
		satisfied bool
		want      string
	}{
		"none bound, let go by another scheduler": {want: "placing the gang again: 0 of 2 members bound"},
		"one bound, let go by another scheduler":  {bound: 1, want: "placing the gang again: 1 of 2 members bound"},
		"let go by this scheduler":                {satisfied: true, want: "all members placed"},
		"minMember bound":                         {bound: 2, want: "all members placed"},
	} {
		t.Run(name, func(t *testing.T) {
			pg := testPodGroup("train", "pg-uid", placed)
			ctx, dyn, w := newStatusTest(t, pg)
			var pods []*corev1.Pod
			for i := 0; i < 2; i++ {
				m := member("default", "train", i, 2, "")
				if i < tc.bound {
					m.Spec.NodeName = "node-0"
				}
				pods = append(pods, m)
			}
			p, _ := newTestPlugin(t, pods)
			p.status = w
			g := &gangSpec{key: "default/train", minMember: 2, podGroup: pg}
			p.satisfied[g.key] = tc.satisfied
			p.retractScheduled(g)
			drain(ctx, w)
			_, c := scheduledCondition(t, ctx, dyn, "train")
			if c == nil || c.Message != tc.want {
				t.Fatalf("Scheduled condition %+v, want the message %q", c, tc.want)
			}
			if tc.want != placed.Message && (c.Status != metav1.ConditionFalse || c.Reason != ReasonScheduling) {
				t.Errorf("retracted as %s/%s, want False/%s", c.Status, c.Reason, ReasonScheduling)
			}
		})
	}
}
