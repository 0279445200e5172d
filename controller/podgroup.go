package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

// PodGroupReconciler counts each PodGroup's running, succeeded and failed
// members and keeps the community phase: Running once minMember members
// run, Finished when they all succeeded, Failed when one failed. The
// scheduler owns the Scheduled condition.
type PodGroupReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler; pod changes requeue their
// PodGroup.
func (r *PodGroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("podgroup").
		For(&schedulingv1alpha1.PodGroup{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := o.GetLabels()[schedulingv1alpha1.PodGroupLabel]
			if name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})).
		Complete(r)
}

// Reconcile updates one PodGroup's counts and phase.
func (r *PodGroupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pg schedulingv1alpha1.PodGroup
	if err := r.Get(ctx, req.NamespacedName, &pg); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(req.Namespace), client.MatchingLabels{schedulingv1alpha1.PodGroupLabel: req.Name}); err != nil {
		return reconcile.Result{}, err
	}
	var running, succeeded, failed int32
	for _, p := range pods.Items {
		switch p.Status.Phase {
		case corev1.PodRunning:
			running++
		case corev1.PodSucceeded:
			succeeded++
		case corev1.PodFailed:
			failed++
		}
	}
	// The phase is derived here only: from the pods, and from the
	// scheduler's Scheduled condition (the scheduler writes nothing else).
	var phase schedulingv1alpha1.PodGroupPhase
	switch {
	case failed > 0:
		phase = schedulingv1alpha1.PodGroupFailed
	case succeeded > 0 && succeeded >= pg.Spec.MinMember && running == 0:
		phase = schedulingv1alpha1.PodGroupFinished
	case running >= pg.Spec.MinMember && pg.Spec.MinMember > 0:
		phase = schedulingv1alpha1.PodGroupRunning
	case meta.IsStatusConditionTrue(pg.Status.Conditions, schedulingv1alpha1.ConditionScheduled):
		phase = schedulingv1alpha1.PodGroupScheduled
	default:
		phase = schedulingv1alpha1.PodGroupPending
	}
	if pg.Status.Running == running && pg.Status.Succeeded == succeeded && pg.Status.Failed == failed && pg.Status.Phase == phase {
		return reconcile.Result{}, nil
	}
	pg.Status.Running, pg.Status.Succeeded, pg.Status.Failed, pg.Status.Phase = running, succeeded, failed, phase
	if err := r.Status().Update(ctx, &pg); err != nil {
		return reconcile.Result{}, fmt.Errorf("update status of PodGroup %s: %w", req, err)
	}
	return reconcile.Result{}, nil
}
