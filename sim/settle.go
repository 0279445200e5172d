package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"

	"github.com/strata-sh/strata/sim/node"
)

// WaitSettled waits until every pod has reached a resting state (running,
// finished, unschedulable, or failing to prepare on its node) and nothing
// has changed for quiet. It returns false if timeout passes first.
func (s *Sim) WaitSettled(ctx context.Context, quiet, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	var last string
	stableSince := time.Now()
	for {
		fp, resting, err := s.snapshot(ctx)
		if err != nil {
			return false, err
		}
		if fp != last {
			last, stableSince = fp, time.Now()
		}
		if resting && time.Since(stableSince) >= quiet {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// snapshot fingerprints the pods and reports whether all are resting.
func (s *Sim) snapshot(ctx context.Context) (string, bool, error) {
	pods, err := s.ControlPlane.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", false, fmt.Errorf("list pods: %w", err)
	}
	var failing, held map[types.UID]bool
	resting := true
	parts := make([]string, 0, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		parts = append(parts, fmt.Sprintf("%s/%s/%s/%s/%s/%s", p.Namespace, p.Name, p.UID, p.Status.Phase, p.Spec.NodeName, scheduledCondition(p)))
		if isResting(p) {
			continue
		}
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending {
			if failing == nil {
				if failing, err = s.failingPrepare(ctx); err != nil {
					return "", false, err
				}
			}
			if failing[p.UID] {
				continue
			}
		}
		if p.Spec.NodeName == "" && scheduledCondition(p) == "" {
			// Held before scheduling (a gang short of members, a claim
			// template that does not exist): resting once something says
			// why.
			if held == nil {
				if held, err = s.heldWithReason(ctx, pods.Items); err != nil {
					return "", false, err
				}
			}
			if held[p.UID] {
				continue
			}
		}
		resting = false
	}
	sort.Strings(parts)
	caughtUp, err := s.controllersCaughtUp(ctx)
	if err != nil {
		return "", false, err
	}
	return strings.Join(parts, "\n"), resting && caughtUp, nil
}

// controllersCaughtUp reports whether the workload controllers have acted
// on the latest version of every workload object (its pods may not exist
// yet right after it was applied).
func (s *Sim) controllersCaughtUp(ctx context.Context) (bool, error) {
	apps := s.ControlPlane.Client.AppsV1()
	all := metav1.ListOptions{}
	deployments, err := apps.Deployments(metav1.NamespaceAll).List(ctx, all)
	if err != nil {
		return false, fmt.Errorf("list deployments: %w", err)
	}
	for _, d := range deployments.Items {
		if d.Status.ObservedGeneration < d.Generation {
			return false, nil
		}
	}
	replicaSets, err := apps.ReplicaSets(metav1.NamespaceAll).List(ctx, all)
	if err != nil {
		return false, fmt.Errorf("list replica sets: %w", err)
	}
	for _, r := range replicaSets.Items {
		if r.Status.ObservedGeneration < r.Generation {
			return false, nil
		}
	}
	statefulSets, err := apps.StatefulSets(metav1.NamespaceAll).List(ctx, all)
	if err != nil {
		return false, fmt.Errorf("list stateful sets: %w", err)
	}
	for _, st := range statefulSets.Items {
		if st.Status.ObservedGeneration < st.Generation {
			return false, nil
		}
	}
	daemonSets, err := apps.DaemonSets(metav1.NamespaceAll).List(ctx, all)
	if err != nil {
		return false, fmt.Errorf("list daemon sets: %w", err)
	}
	for _, d := range daemonSets.Items {
		if d.Status.ObservedGeneration < d.Generation {
			return false, nil
		}
	}
	jobs, err := s.ControlPlane.Client.BatchV1().Jobs(metav1.NamespaceAll).List(ctx, all)
	if err != nil {
		return false, fmt.Errorf("list jobs: %w", err)
	}
	for _, j := range jobs.Items {
		if j.Status.StartTime == nil && (j.Spec.Suspend == nil || !*j.Spec.Suspend) {
			return false, nil
		}
	}
	return true, nil
}

func isResting(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
		return p.DeletionTimestamp == nil
	}
	return p.Spec.NodeName == "" && scheduledCondition(p) == corev1.PodReasonUnschedulable
}

func scheduledCondition(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Reason
		}
	}
	return ""
}

func (s *Sim) failingPrepare(ctx context.Context) (map[types.UID]bool, error) {
	events, err := s.ControlPlane.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: "reason=" + node.ReasonFailedPrepare,
	})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out := map[types.UID]bool{}
	for _, ev := range events.Items {
		out[ev.InvolvedObject.UID] = true
	}
	return out, nil
}

// heldWithReason returns the unscheduled pods that something explains:
// a warning event on the pod, or a Scheduled=False condition on its
// PodGroup.
func (s *Sim) heldWithReason(ctx context.Context, pods []corev1.Pod) (map[types.UID]bool, error) {
	client := s.ControlPlane.Client
	events, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out := map[types.UID]bool{}
	for _, ev := range events.Items {
		if ev.InvolvedObject.Kind == "Pod" {
			out[ev.InvolvedObject.UID] = true
		}
	}
	waiting := map[string]bool{}
	if s.dyn != nil {
		list, err := s.dyn.Resource(schedulingv1alpha1.GroupVersion.WithResource("podgroups")).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, u := range list.Items {
				conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
				for _, c := range conds {
					if m, ok := c.(map[string]any); ok && m["type"] == schedulingv1alpha1.ConditionScheduled && m["status"] == "False" {
						waiting[u.GetNamespace()+"/"+u.GetName()] = true
					}
				}
			}
		}
	}
	for _, p := range pods {
		name := p.Labels[schedulingv1alpha1.PodGroupLabel]
		if name == "" {
			name = schedulingv1alpha1.AnnotatedGang(&p)
		}
		if name != "" && waiting[p.Namespace+"/"+name] {
			out[p.UID] = true
		}
	}
	return out, nil
}
