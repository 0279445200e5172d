package gang

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

// Reasons of PodGroup conditions and events.
const (
	ReasonUnschedulable     = "Unschedulable"
	ReasonScheduled         = "Scheduled"
	ReasonWaitingForMembers = "WaitingForMembers"
	ReasonInvalidGang       = "InvalidGang"
)

// statusWriter reports gang outcomes on PodGroups without blocking the
// scheduling cycle: a condition on the PodGroup and an event when the
// message changes. The scheduler writes only its Scheduled condition;
// counts and phase are strata-controller's, derived from the pods and
// this condition, so each status field has one writer.
type statusWriter struct {
	src      *sources
	recorder events.EventRecorderLogger
	updates  chan statusUpdate

	mu sync.Mutex
	// sent is the condition last sent per PodGroup: the lister's copy
	// lags, and deduplicating against it alone drops a change back to a
	// message the PodGroup showed before.
	sent map[types.UID]metav1.Condition
	// told is the last message sent per pod of a gang without a PodGroup.
	told map[types.UID]string
}

type statusUpdate struct {
	pg   *schedulingv1alpha1.PodGroup
	cond metav1.Condition
}

func newStatusWriter(ctx context.Context, src *sources, recorder events.EventRecorderLogger) *statusWriter {
	w := &statusWriter{src: src, recorder: recorder, updates: make(chan statusUpdate, 256), sent: map[types.UID]metav1.Condition{}, told: map[types.UID]string{}}
	if src != nil && src.podGroupInformer != nil {
		// Forget deleted PodGroups.
		_, _ = src.podGroupInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				w.mu.Lock()
				delete(w.sent, m.GetUID())
				w.mu.Unlock()
			}
		}})
	}
	go w.run(ctx)
	return w
}

func (w *statusWriter) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-w.updates:
			if err := w.src.setCondition(ctx, u.pg, u.cond); err != nil {
				logger.V(2).Info("Cannot update PodGroup status", "podGroup", klog.KObj(u.pg), "err", err)
			}
		}
	}
}

func (w *statusWriter) send(g *gangSpec, cond metav1.Condition, eventType string) {
	if g == nil || g.podGroup == nil {
		return
	}
	same := func(c metav1.Condition) bool {
		return c.Type == cond.Type && c.Status == cond.Status && c.Message == cond.Message
	}
	w.mu.Lock()
	last, known := w.sent[g.podGroup.UID]
	if known && same(last) {
		w.mu.Unlock()
		return
	}
	if !known {
		for _, c := range g.podGroup.Status.Conditions {
			if same(c) {
				w.mu.Unlock()
				return
			}
		}
	}
	w.sent[g.podGroup.UID] = cond
	w.mu.Unlock()
	ref := &corev1.ObjectReference{APIVersion: schedulingv1alpha1.GroupVersion.String(), Kind: "PodGroup",
		Namespace: g.podGroup.Namespace, Name: g.podGroup.Name, UID: g.podGroup.UID}
	if w.recorder != nil {
		w.recorder.Eventf(ref, nil, eventType, cond.Reason, "Scheduling", "%s", cond.Message)
	}
	select {
	case w.updates <- statusUpdate{pg: g.podGroup, cond: cond}:
	default: // a later update will carry the news
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
