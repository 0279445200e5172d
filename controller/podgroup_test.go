package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

func annotatedPod(name, gang, minAvailable string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: map[string]string{
			schedulingv1alpha1.KoordinatorAnnotationPrefix + "name":          gang,
			schedulingv1alpha1.KoordinatorAnnotationPrefix + "min-available": minAvailable,
		}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newReconciler(t *testing.T, objs ...client.Object) *PodGroupReconciler {
	t.Helper()
	scheme, err := Scheme()
	must(t, err)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, annotatedGangField, indexAnnotatedGang).
		WithStatusSubresource(&schedulingv1alpha1.PodGroup{}).Build()
	return &PodGroupReconciler{Client: c}
}

func reconcileGang(t *testing.T, r *PodGroupReconciler, name string) {
	t.Helper()
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}})
	must(t, err)
}

// A gang declared on annotations gets a labelled PodGroup with its
// minMember and counts, which goes with its last pod.
func TestAnnotatedGangPodGroupLifecycle(t *testing.T) {
	r := newReconciler(t, annotatedPod("w-0", "job", "3", corev1.PodRunning), annotatedPod("w-1", "job", "3", corev1.PodPending))
	reconcileGang(t, r, "job")
	var pg schedulingv1alpha1.PodGroup
	must(t, r.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "job"}, &pg))
	if pg.Labels[schedulingv1alpha1.FromPodAnnotationsLabel] != "true" || pg.Spec.MinMember != 3 || pg.Status.Running != 1 || pg.Status.Phase != schedulingv1alpha1.PodGroupPending {
		t.Fatalf("PodGroup labels %v, minMember %d, running %d, phase %s; want the label, 3, 1, Pending", pg.Labels, pg.Spec.MinMember, pg.Status.Running, pg.Status.Phase)
	}

	for _, n := range []string{"w-0", "w-1"} {
		must(t, r.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: n}}))
	}
	reconcileGang(t, r, "job")
	err := r.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "job"}, &pg)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("PodGroup of a gang with no pods left: %v, want not found", err)
	}
}

// A malformed min-available gives minMember 1 (the scheduler names the
// annotation); a user's PodGroup of the same name is never changed or
// deleted, and counts the pods that name it by annotation.
func TestAnnotatedGangEdgeCases(t *testing.T) {
	r := newReconciler(t, annotatedPod("a-0", "bad", "two", corev1.PodPending), annotatedPod("m-0", "mine", "2", corev1.PodRunning),
		&schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mine"}, Spec: schedulingv1alpha1.PodGroupSpec{MinMember: 5}})
	reconcileGang(t, r, "bad")
	var pg schedulingv1alpha1.PodGroup
	must(t, r.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "bad"}, &pg))
	if pg.Spec.MinMember != 1 {
		t.Errorf("minMember %d for min-available \"two\", want 1", pg.Spec.MinMember)
	}

	reconcileGang(t, r, "mine")
	must(t, r.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "mine"}, &pg))
	if pg.Spec.MinMember != 5 || len(pg.Labels) != 0 || pg.Status.Running != 1 {
		t.Errorf("the user's PodGroup: minMember %d, labels %v, running %d; want it unchanged, counting the annotated pod", pg.Spec.MinMember, pg.Labels, pg.Status.Running)
	}
}
