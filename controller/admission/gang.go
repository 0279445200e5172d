package admission

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/gangspec"
)

var annotationsPath = field.NewPath("metadata", "annotations")

// annotationErrors names each bad annotation by its field,
// metadata.annotations[<key>].
func annotationErrors(errs []*gangspec.Error) field.ErrorList {
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		out = append(out, wrapped(annotationsPath.Key(e.Key), e.Detail))
	}
	return out
}

// validatePod checks the gang annotations of a pod as the gang plugin
// reads them for a gang declared on pods: min-available, then the keys
// every gang shares. A pod without gang annotations is allowed at once.
func validatePod(_ context.Context, req admission.Request) admission.Response {
	return review(req, func(raw []byte) (field.ErrorList, error) {
		var pod struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := decode(raw, &pod); err != nil {
			return nil, err
		}
		ann := pod.Metadata.Annotations
		if !gangspec.HasAny(ann) {
			return nil, nil
		}
		var errs []*gangspec.Error
		minMember, err := gangspec.MinAvailable(ann)
		if err != nil {
			errs = append(errs, err)
		}
		name, _, _ := gangspec.Annotation(ann, gangspec.KeyName)
		_, more := gangspec.Parse(ann, gangspec.Gang{Namespace: pod.Metadata.Namespace, Key: pod.Metadata.Namespace + "/" + name, MinMember: minMember})
		return annotationErrors(append(errs, more...)), nil
	})
}

// validatePodGroup checks a PodGroup's spec and its gang annotations,
// with its minMember (total-number may not be below it).
func validatePodGroup(_ context.Context, req admission.Request) admission.Response {
	return review(req, func(raw []byte) (field.ErrorList, error) {
		var pg schedulingv1alpha1.PodGroup
		if err := decode(raw, &pg); err != nil {
			return nil, err
		}
		errs := podGroupSpecErrors(field.NewPath("spec"), &pg.Spec)
		_, annErrs := gangspec.Parse(pg.Annotations, gangspec.Gang{Namespace: pg.Namespace, Key: pg.Namespace + "/" + pg.Name, MinMember: max(int(pg.Spec.MinMember), 1)})
		return append(errs, annotationErrors(annErrs)...), nil
	})
}

// podGroupSpecErrors checks minMember, scheduleTimeoutSeconds and
// minResources.
func podGroupSpecErrors(p *field.Path, spec *schedulingv1alpha1.PodGroupSpec) field.ErrorList {
	var errs field.ErrorList
	if spec.MinMember < 1 {
		errs = append(errs, field.Invalid(p.Child("minMember"), spec.MinMember, "must be at least 1"))
	}
	if s := spec.ScheduleTimeoutSeconds; s != nil && *s < 1 {
		errs = append(errs, field.Invalid(p.Child("scheduleTimeoutSeconds"), *s, "must be at least 1"))
	}
	for _, name := range sortedNames(spec.MinResources) {
		if q := spec.MinResources[name]; q.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child("minResources").Key(string(name)), q.String(), "must not be negative"))
		}
	}
	return errs
}

// sortedNames orders a resource list's names so that messages are
// stable.
func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
