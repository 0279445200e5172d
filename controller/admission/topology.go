package admission

import (
	"context"
	"errors"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
	"github.com/strata-sh/strata/internal/topotree"
)

// validateTopology checks that a ClusterNetworkTopology's layers form one
// chain, as the scheduler and the controller read them (topotree.Layers:
// one top layer, known parents, no duplicate or cycle), and that every
// labelKey is a label key.
func validateTopology(_ context.Context, req admission.Request) admission.Response {
	return review(req, func(raw []byte) (field.ErrorList, error) {
		var t topologyv1alpha1.ClusterNetworkTopology
		if err := decode(raw, &t); err != nil {
			return nil, err
		}
		return topologyErrors(t.Spec), nil
	})
}

func topologyErrors(spec topologyv1alpha1.ClusterNetworkTopologySpec) field.ErrorList {
	p := field.NewPath("spec", "networkTopologySpec")
	var errs field.ErrorList
	if _, err := topotree.Layers(spec); err != nil {
		errs = append(errs, fieldErrors(p, err)...)
	}
	for i, l := range spec.NetworkTopologySpec {
		kp := p.Index(i).Child("labelKey")
		seen := sets.New[string]()
		for j, key := range l.LabelKey {
			if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
				errs = append(errs, field.Invalid(kp.Index(j), key, strings.Join(msgs, "; ")))
			}
			if seen.Has(key) {
				errs = append(errs, field.Duplicate(kp.Index(j), key))
			}
			seen.Insert(key)
		}
	}
	return errs
}

// fieldErrors unpacks the field errors of an aggregate (as
// field.ErrorList.ToAggregate makes them); anything else is reported
// at p.
func fieldErrors(p *field.Path, err error) field.ErrorList {
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) {
		return field.ErrorList{wrapped(p, err.Error())}
	}
	var out field.ErrorList
	for _, e := range agg.Errors() {
		var fe *field.Error
		if errors.As(e, &fe) {
			out = append(out, fe)
		} else {
			out = append(out, wrapped(p, e.Error()))
		}
	}
	return out
}
