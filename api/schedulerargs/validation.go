package schedulerargs

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Weight bounds of a NodeResourcesFitPlus resource.
const (
	MinWeight = 1
	MaxWeight = 100
)

// Validate checks defaulted args; each error names its field, as in
// resources[nvidia.com/gpu].type.
func (a *NodeResourcesFitPlusArgs) Validate() field.ErrorList {
	p := field.NewPath("resources")
	if len(a.Resources) == 0 {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(a.Resources)) {
		rp := p.Key(string(name))
		errs = append(errs, validateName(rp, name)...)
		r := a.Resources[name]
		switch r.Type {
		case LeastAllocated, MostAllocated:
		case "":
			errs = append(errs, field.Required(rp.Child("type"), fmt.Sprintf("one of %q", ScoringTypes)))
		default:
			errs = append(errs, field.NotSupported(rp.Child("type"), r.Type, ScoringTypes))
		}
		if r.Weight < MinWeight || r.Weight > MaxWeight {
			errs = append(errs, field.Invalid(rp.Child("weight"), r.Weight, fmt.Sprintf("must be between %d and %d", MinWeight, MaxWeight)))
		}
	}
	return errs
}

// Validate checks the args; each error names its field, as in
// resources[1].
func (a *ScarceResourceAvoidanceArgs) Validate() field.ErrorList {
	p := field.NewPath("resources")
	if len(a.Resources) == 0 {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	seen := sets.New[corev1.ResourceName]()
	for i, name := range a.Resources {
		if seen.Has(name) {
			errs = append(errs, field.Duplicate(p.Index(i), name))
			continue
		}
		seen.Insert(name)
		errs = append(errs, validateName(p.Index(i), name)...)
	}
	return errs
}

// validateName accepts qualified names: the form of resource names
// (cpu, nvidia.com/gpu) and of most DeviceClass names.
func validateName(p *field.Path, name corev1.ResourceName) field.ErrorList {
	if msgs := validation.IsQualifiedName(string(name)); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, name, strings.Join(msgs, "; "))}
	}
	return nil
}

// Validate checks defaulted args; each error names its field.
func (a *StrataFragmentationArgs) Validate() field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("deviceClasses")
	if len(a.DeviceClasses) == 0 {
		errs = append(errs, field.Required(p, "the GPUs' DeviceClasses"))
	}
	// A class is either the GPUs' or their MIG placements', once.
	seen := sets.New[string]()
	for _, list := range []struct {
		path    *field.Path
		classes []string
	}{{p, a.DeviceClasses}, {field.NewPath("migDeviceClasses"), a.MIGDeviceClasses}} {
		for i, c := range list.classes {
			if seen.Has(c) {
				errs = append(errs, field.Duplicate(list.path.Index(i), c))
			}
			seen.Insert(c)
			if msgs := validation.IsDNS1123Subdomain(c); len(msgs) > 0 {
				errs = append(errs, field.Invalid(list.path.Index(i), c, strings.Join(msgs, "; ")))
			}
		}
	}
	if w := a.UnreachableWeight; w != nil && (*w < 0 || *w > 10000) {
		errs = append(errs, field.Invalid(field.NewPath("unreachableWeight"), *w, "must be between 0 and 10000 (percent)"))
	}
	if c := a.CoveragePercent; c < 1 || c > 100 {
		errs = append(errs, field.Invalid(field.NewPath("coveragePercent"), c, "must be between 1 and 100"))
	}
	if h := a.HalfLifePods; h != nil && *h < 0 {
		errs = append(errs, field.Invalid(field.NewPath("halfLifePods"), *h, "must not be negative"))
	}
	return errs
}
