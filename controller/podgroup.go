package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

// PodGroupReconciler counts each PodGroup's running, succeeded and failed
// members and keeps the community phase: Running once minMember members
// run, Finished when they all succeeded, Failed when one failed. The
// scheduler owns the Scheduled condition.
//
// A gang declared on pod annotations alone (Koordinator's way) gets a
// PodGroup too, labelled FromPodAnnotationsLabel, so that it shows the
// same status and counts as any other: the reconciler creates it with the
// gang's first pod, keeps its minMember, and deletes it with the last.
// A PodGroup of that name that a user made is left alone.
type PodGroupReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler; pod changes requeue their
// PodGroup.
func (r *PodGroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, annotatedGangField, indexAnnotatedGang); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("podgroup").
		For(&schedulingv1alpha1.PodGroup{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			pod, ok := o.(*corev1.Pod)
			if !ok {
				return nil
			}
			name := pod.Labels[schedulingv1alpha1.PodGroupLabel]
			if name == "" {
				name = schedulingv1alpha1.AnnotatedGang(pod)
			}
			if name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})).
		Complete(r)
}

// Reconcile updates one PodGroup's counts and phase, and creates or
// deletes the PodGroup of a gang declared on pod annotations.
func (r *PodGroupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pg schedulingv1alpha1.PodGroup
	err := r.Get(ctx, req.NamespacedName, &pg)
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	found := err == nil
	mirror := found && pg.Labels[schedulingv1alpha1.FromPodAnnotationsLabel] == "true"
	var members []corev1.Pod
	if !found || mirror {
		if members, err = r.annotatedMembers(ctx, req.NamespacedName); err != nil {
			return reconcile.Result{}, err
		}
	}
	switch {
	case !found && len(members) == 0:
		return reconcile.Result{}, nil
	case !found:
		return reconcile.Result{}, r.createMirror(ctx, req.NamespacedName, members)
	case mirror && len(members) == 0:
		if pg.DeletionTimestamp != nil {
			return reconcile.Result{}, nil
		}
		err := r.Delete(ctx, &pg, client.Preconditions{UID: &pg.UID})
		return reconcile.Result{}, client.IgnoreNotFound(err)
	case mirror:
		if want := minMemberOf(members); pg.Spec.MinMember != want {
			pg.Spec.MinMember = want
			if err := r.Update(ctx, &pg); err != nil {
				return reconcile.Result{}, fmt.Errorf("update minMember of PodGroup %s: %w", req, err)
			}
		}
	default:
		var pods corev1.PodList
		if err := r.List(ctx, &pods, client.InNamespace(req.Namespace), client.MatchingLabels{schedulingv1alpha1.PodGroupLabel: req.Name}); err != nil {
			return reconcile.Result{}, err
		}
		// Pods that name the gang only by annotation belong to it too.
		annotated, err := r.annotatedMembers(ctx, req.NamespacedName)
		if err != nil {
			return reconcile.Result{}, err
		}
		members = append(pods.Items, annotated...)
	}
	return reconcile.Result{}, r.updateStatus(ctx, &pg, members)
}

// annotatedGangField indexes pods by the gang they declare with
// annotations alone.
const annotatedGangField = "strata.annotatedGang"

func indexAnnotatedGang(o client.Object) []string {
	if name := schedulingv1alpha1.AnnotatedGang(o.(*corev1.Pod)); name != "" {
		return []string{name}
	}
	return nil
}

// annotatedMembers lists the pods that declare the gang with annotations.
func (r *PodGroupReconciler) annotatedMembers(ctx context.Context, gang types.NamespacedName) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(gang.Namespace), client.MatchingFields{annotatedGangField: gang.Name}); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// minMemberOf reads min-available from the gang's oldest pod; a value
// that is not a positive integer counts as 1 here (the scheduler reports
// it on the PodGroup).
func minMemberOf(members []corev1.Pod) int32 {
	oldest := members[0]
	for _, p := range members[1:] {
		if p.CreationTimestamp.Before(&oldest.CreationTimestamp) {
			oldest = p
		}
	}
	v, _, _ := schedulingv1alpha1.GangAnnotation(oldest.Annotations, "min-available")
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 {
		return 1
	}
	return int32(n)
}

func (r *PodGroupReconciler) createMirror(ctx context.Context, gang types.NamespacedName, members []corev1.Pod) error {
	pg := &schedulingv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: gang.Namespace, Name: gang.Name,
			Labels: map[string]string{schedulingv1alpha1.FromPodAnnotationsLabel: "true"}},
		Spec: schedulingv1alpha1.PodGroupSpec{MinMember: minMemberOf(members)},
	}
	if err := r.Create(ctx, pg); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil // the watch brings it back
		}
		if apierrors.IsInvalid(err) {
			// A gang name that cannot name an object: the scheduler
			// still reports on the pods; retrying cannot help.
			log.FromContext(ctx).Info("Gang name cannot name a PodGroup", "gang", gang, "err", err)
			return nil
		}
		return fmt.Errorf("create PodGroup for the gang of pods annotated %s: %w", gang, err)
	}
	return r.updateStatus(ctx, pg, members)
}

func (r *PodGroupReconciler) updateStatus(ctx context.Context, pg *schedulingv1alpha1.PodGroup, members []corev1.Pod) error {
	var running, succeeded, failed int32
	for _, p := range members {
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
		return nil
	}
	pg.Status.Running, pg.Status.Succeeded, pg.Status.Failed, pg.Status.Phase = running, succeeded, failed, phase
	if err := r.Status().Update(ctx, pg); err != nil {
		return fmt.Errorf("update status of PodGroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return nil
}
