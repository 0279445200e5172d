package gang

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/scheduler-plugins/internal/queueworkers"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

// Reasons of PodGroup conditions and events.
const (
	ReasonUnschedulable     = "Unschedulable"
	ReasonScheduled         = "Scheduled"
	ReasonWaitingForMembers = "WaitingForMembers"
	ReasonInvalidGang       = "InvalidGang"
)

// statusWorkers is how many PodGroups are written at once. The queue
// never hands one PodGroup to two workers, so writes of a PodGroup stay
// in order.
const statusWorkers = 4

// statusWriter reports gang outcomes on PodGroups without blocking the
// scheduling cycle: a condition on the PodGroup and an event when the
// message changes. The scheduler writes only its Scheduled condition;
// counts and phase are strata-controller's, derived from the pods and
// this condition, so each status field has one writer.
//
// The condition a gang should show is kept per PodGroup identity (the
// namespace, name and UID: a PodGroup deleted and created again under
// its name is another key) until it is written: a keyed, rate-limited
// workqueue carries the keys, so a PodGroup whose state changes while a
// write is queued or failing is written once, with its latest state. A
// failed write is retried with backoff; nothing is dropped because the
// API is slow or down. A state counts as written only once the API
// server accepted it.
type statusWriter struct {
	src      *sources
	recorder events.EventRecorderLogger
	queue    workqueue.TypedRateLimitingInterface[podGroupKey]

	mu sync.Mutex
	// desired is the condition each PodGroup should show, and whether
	// it has been written. The lister's copy lags, and deduplicating
	// against it alone drops a change back to a message the PodGroup
	// showed before; an entry stays until its PodGroup is deleted.
	desired map[podGroupKey]desiredCondition
	// told is the last message sent per pod of a gang without a PodGroup.
	told map[types.UID]string
}

// podGroupKey is a PodGroup's identity.
type podGroupKey struct {
	namespace, name string
	uid             types.UID
}

// desiredCondition is what the scheduler wants a PodGroup to show. With
// clear set it wants none of its conditions there: a write raced with a
// recreation of the PodGroup and reached the new one.
type desiredCondition struct {
	cond    metav1.Condition
	clear   bool
	written bool
	// at is when the condition was decided: a condition the PodGroup got
	// later, from another scheduler (a standby's plugin sees pods reach
	// its queue too, and a leader that took over decides on its own), is
	// not overwritten with it.
	at time.Time
}

func (d desiredCondition) is(c metav1.Condition) bool {
	return !d.clear && sameCondition(d.cond, c)
}

func sameCondition(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

func keyOfPodGroup(pg metav1.Object) podGroupKey {
	return podGroupKey{namespace: pg.GetNamespace(), name: pg.GetName(), uid: pg.GetUID()}
}

// statusRateLimiter backs off a PodGroup whose writes fail, from 100 ms
// doubling to 30 s; the scheduler's client limits the rate of all its
// requests together.
func statusRateLimiter() workqueue.TypedRateLimiter[podGroupKey] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[podGroupKey](100*time.Millisecond, 30*time.Second)
}

// newStatusWriter returns a writer whose workers run until ctx ends.
func newStatusWriter(ctx context.Context, src *sources, recorder events.EventRecorderLogger) *statusWriter {
	w := makeStatusWriter(src, recorder, statusRateLimiter())
	go w.run(ctx, statusWorkers)
	return w
}

// makeStatusWriter returns a writer that queues updates; run writes them.
func makeStatusWriter(src *sources, recorder events.EventRecorderLogger, limiter workqueue.TypedRateLimiter[podGroupKey]) *statusWriter {
	w := &statusWriter{src: src, recorder: recorder,
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[podGroupKey]{Name: "gang-podgroup-status"}),
		desired: map[podGroupKey]desiredCondition{}, told: map[types.UID]string{}}
	if src != nil && src.podGroupInformer != nil {
		// Forget deleted PodGroups: a queued write of one finds nothing
		// to write.
		_, _ = src.podGroupInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				w.forget(keyOfPodGroup(m))
			}
		}})
	}
	return w
}

func (w *statusWriter) forget(key podGroupKey) {
	w.mu.Lock()
	delete(w.desired, key)
	w.mu.Unlock()
	w.queue.Forget(key)
}

// run writes queued PodGroups with the given number of workers until ctx
// ends. The queue then shuts down: a worker finishes the write it is in
// (ctx is done, so it fails fast) and what is still queued is left, as
// the scheduler is stopping.
func (w *statusWriter) run(ctx context.Context, workers int) {
	queueworkers.Run(ctx, workers, w.queue.ShutDown, w.processNext)
}

// processNext writes one queued PodGroup; false once the queue is shut
// down.
func (w *statusWriter) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	w.mu.Lock()
	d, ok := w.desired[key]
	w.mu.Unlock()
	if !ok || d.written {
		w.queue.Forget(key)
		return true
	}
	logger := klog.FromContext(ctx)
	err := w.write(ctx, key, d)
	switch {
	case err == nil:
		w.queue.Forget(key)
	case err == errSuperseded:
		logger.V(2).Info("PodGroup shows a later condition; not overwritten", "podGroup", klog.KRef(key.namespace, key.name), "condition", d.cond.Reason)
		w.markWritten(key, d)
		w.queue.Forget(key)
	case apierrors.IsNotFound(err):
		logger.V(2).Info("PodGroup is gone; its status is not written", "podGroup", klog.KRef(key.namespace, key.name))
		w.forget(key)
	default:
		logger.V(2).Info("Cannot update PodGroup status; retrying", "podGroup", klog.KRef(key.namespace, key.name), "err", err)
		w.queue.AddRateLimited(key)
	}
	return true
}

// write applies what key should show, if key is still the PodGroup of
// its name as far as the informer knows. The informer can lag behind a
// recreation, so the object the API server answers with is checked too:
// a write that reached another PodGroup is undone there.
func (w *statusWriter) write(ctx context.Context, key podGroupKey, d desiredCondition) error {
	conditions := []any{}
	if !d.clear {
		pg := w.src.podGroup(key.namespace, key.name)
		if pg == nil || pg.UID != key.uid {
			return apierrors.NewNotFound(podGroupsGVR.GroupResource(), key.name)
		}
		cond := d.cond
		cond.ObservedGeneration = pg.Generation
		cond.LastTransitionTime = metav1.Now()
		old := meta.FindStatusCondition(pg.Status.Conditions, cond.Type)
		if old != nil && !sameCondition(*old, cond) && old.LastTransitionTime.After(d.at.Truncate(time.Second)) {
			return errSuperseded
		}
		if old != nil && old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		}
		c, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cond)
		if err != nil {
			return err
		}
		conditions = append(conditions, c)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": schedulingv1alpha1.GroupVersion.String(),
		"kind":       "PodGroup",
		"metadata":   map[string]any{"name": key.name, "namespace": key.namespace},
		"status":     map[string]any{"conditions": conditions},
	}}
	got, err := w.src.dyn.Resource(podGroupsGVR).Namespace(key.namespace).ApplyStatus(ctx, key.name, u, metav1.ApplyOptions{FieldManager: Name, Force: true})
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if got.GetUID() != key.uid {
		// The PodGroup was recreated between the informer's view and
		// the write: the new one is written again with its own state,
		// or with none of ours.
		delete(w.desired, key)
		other := keyOfPodGroup(got)
		o, ok := w.desired[other]
		if !ok {
			o = desiredCondition{clear: true}
		}
		o.written = false
		w.desired[other] = o
		w.queue.Add(other)
		return nil
	}
	w.markWrittenLocked(key, d)
	return nil
}

// errSuperseded: the PodGroup shows a condition set after the one to
// write was decided.
var errSuperseded = errors.New("the PodGroup shows a later condition")

// markWritten records d as written, unless key wants something newer.
func (w *statusWriter) markWritten(key podGroupKey, d desiredCondition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.markWrittenLocked(key, d)
}

func (w *statusWriter) markWrittenLocked(key podGroupKey, d desiredCondition) {
	if cur, ok := w.desired[key]; ok && cur == d {
		cur.written = true
		w.desired[key] = cur
	}
}

func (w *statusWriter) send(g *gangSpec, cond metav1.Condition, eventType string) {
	if g == nil || g.podGroup == nil {
		return
	}
	key := keyOfPodGroup(g.podGroup)
	w.mu.Lock()
	d, known := w.desired[key]
	if known && d.is(cond) {
		w.mu.Unlock()
		return
	}
	if !known {
		for _, c := range g.podGroup.Status.Conditions {
			if sameCondition(c, cond) {
				w.mu.Unlock()
				return
			}
		}
	}
	w.desired[key] = desiredCondition{cond: cond, at: time.Now()}
	w.mu.Unlock()
	w.queue.Add(key)
	ref := &corev1.ObjectReference{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: "PodGroup",
		Namespace: g.podGroup.Namespace, Name: g.podGroup.Name, UID: g.podGroup.UID}
	if w.recorder != nil {
		w.recorder.Eventf(ref, nil, eventType, cond.Reason, "Scheduling", "%s", cond.Message)
	}
}

func (w *statusWriter) unschedulable(g *gangSpec, msg string) {
	w.send(g, metav1.Condition{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: ReasonUnschedulable, Message: msg}, corev1.EventTypeWarning)
}

// waiting says why a gang is held before scheduling: on its PodGroup, or
// on the pod for a gang declared on pods alone.
func (w *statusWriter) waiting(g *gangSpec, pod *corev1.Pod, reason, msg string) {
	if g.podGroup != nil {
		w.send(g, metav1.Condition{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: reason, Message: msg}, corev1.EventTypeWarning)
		return
	}
	w.podEventType(pod, corev1.EventTypeWarning, reason, msg)
}

// forgetPod drops what was said to a pod.
func (w *statusWriter) forgetPod(uid types.UID) {
	w.mu.Lock()
	delete(w.told, uid)
	w.mu.Unlock()
}

func (w *statusWriter) scheduled(g *gangSpec) {
	w.send(g, metav1.Condition{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: ReasonScheduled, Message: "all members placed"}, corev1.EventTypeNormal)
}

// ReasonScheduling: a gang whose PodGroup said Scheduled is being placed
// again.
const ReasonScheduling = "Scheduling"

// retractScheduled takes back a PodGroup's Scheduled=True that no longer
// holds: a member of the gang is being scheduled, fewer than minMember
// members are bound, and this scheduler did not let the gang go. The
// condition was written by a leader that stopped before the members
// bound, or for an earlier run of the job whose pods were replaced;
// left as it is, it would say "all members placed" of a gang whose pods
// are all pending. The attempt's outcome (placed, unschedulable, waiting)
// replaces it in turn.
func (p *Plugin) retractScheduled(g *gangSpec) {
	if g.podGroup == nil {
		return
	}
	cond := meta.FindStatusCondition(g.podGroup.Status.Conditions, schedulingv1alpha1.ConditionScheduled)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		return
	}
	p.mu.Lock()
	satisfied := p.satisfied[g.key]
	p.mu.Unlock()
	if satisfied {
		return
	}
	bound := 0
	for _, m := range p.members(g.key) {
		if m.Spec.NodeName != "" {
			bound++
		}
	}
	if bound >= g.minMember {
		return
	}
	p.status.send(g, metav1.Condition{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: ReasonScheduling,
		Message: fmt.Sprintf("placing the gang again: %d of %d members bound", bound, g.minMember)}, corev1.EventTypeNormal)
}

// ReasonPreempted is the event reason of a job-level preemption.
const ReasonPreempted = "Preempted"

func (w *statusWriter) preempted(g *gangSpec, msg string) {
	if g == nil || g.podGroup == nil || w.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: "PodGroup",
		Namespace: g.podGroup.Namespace, Name: g.podGroup.Name, UID: g.podGroup.UID}
	w.recorder.Eventf(ref, nil, corev1.EventTypeNormal, ReasonPreempted, "Preempting", "%s", msg)
}

func (w *statusWriter) bindFailed(g *gangSpec, msg string) {
	w.send(g, metav1.Condition{Type: schedulingv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: ReasonBindFailed, Message: msg}, corev1.EventTypeWarning)
}

// podEvent tells a pod something once per message.
func (w *statusWriter) podEvent(pod *corev1.Pod, reason, msg string) {
	w.podEventType(pod, corev1.EventTypeNormal, reason, msg)
}

func (w *statusWriter) podEventType(pod *corev1.Pod, eventType, reason, msg string) {
	w.mu.Lock()
	if w.told[pod.UID] == msg {
		w.mu.Unlock()
		return
	}
	w.told[pod.UID] = msg
	w.mu.Unlock()
	if w.recorder != nil {
		w.recorder.Eventf(pod, nil, eventType, reason, "Scheduling", "%s", msg)
	}
}
