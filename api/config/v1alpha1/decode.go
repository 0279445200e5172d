package v1alpha1

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/strata-sh/strata/internal/decode"
)

// GroupVersion of the opaque configs.
var GroupVersion = schema.GroupVersion{Group: "config.strata.sh", Version: "v1alpha1"}

// DecodeGpuConfig decodes opaque parameters strictly: the apiVersion and
// kind must be this package's, and unknown or duplicate fields are errors
// that name the field. The result is validated.
func DecodeGpuConfig(raw []byte) (*GpuConfig, error) {
	cfg := &GpuConfig{}
	if err := decode.Strict(raw, cfg); err != nil {
		return nil, fmt.Errorf("decode %s: %w", GpuConfigKind, err)
	}
	if gvk := cfg.GroupVersionKind(); gvk != GroupVersion.WithKind(GpuConfigKind) {
		return nil, fmt.Errorf("opaque config has apiVersion %q and kind %q, want %s and %s",
			cfg.APIVersion, cfg.Kind, GroupVersion.String(), GpuConfigKind)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return cfg, nil
}

// Validate checks the config on its own; limits that depend on the
// device are checked by the driver at prepare time.
func (c *GpuConfig) Validate() field.ErrorList {
	if c.Sharing == nil {
		return nil
	}
	var errs field.ErrorList
	p := field.NewPath("sharing")
	s := c.Sharing
	switch s.Strategy {
	case SharingHAMiCore, SharingMPS, SharingTimeSlicing, SharingNone:
	case "":
		errs = append(errs, field.Required(p.Child("strategy"), ""))
	default:
		errs = append(errs, field.NotSupported(p.Child("strategy"), s.Strategy,
			[]SharingStrategy{SharingHAMiCore, SharingMPS, SharingTimeSlicing, SharingNone}))
	}
	if s.HAMiCore != nil {
		hp := p.Child("hamiCore")
		if s.Strategy != SharingHAMiCore {
			errs = append(errs, field.Forbidden(hp, "only with strategy HAMiCore"))
		}
		errs = append(errs, percent(hp.Child("coreLimit"), s.HAMiCore.CoreLimit)...)
		errs = append(errs, positive(hp.Child("memoryLimit"), s.HAMiCore.MemoryLimit)...)
	}
	if s.TimeSlicing != nil {
		tp := p.Child("timeSlicing")
		if s.Strategy != SharingTimeSlicing {
			errs = append(errs, field.Forbidden(tp, "only with strategy TimeSlicing"))
		}
		if iv := s.TimeSlicing.Interval; iv != "" && !slices.Contains(TimeSliceIntervals, iv) {
			errs = append(errs, field.NotSupported(tp.Child("interval"), iv, TimeSliceIntervals))
		}
	}
	switch s.ComputeShare {
	case "", ComputeShareProportional, ComputeShareUnlimited:
	default:
		errs = append(errs, field.NotSupported(p.Child("computeShare"), s.ComputeShare, []ComputeShare{ComputeShareProportional, ComputeShareUnlimited}))
	}
	if s.MPS != nil {
		mp := p.Child("mps")
		if s.Strategy != SharingMPS {
			errs = append(errs, field.Forbidden(mp, "only with strategy MPS"))
		}
		errs = append(errs, percent(mp.Child("activeThreadPercentage"), s.MPS.ActiveThreadPercentage)...)
		errs = append(errs, positive(mp.Child("pinnedMemoryLimit"), s.MPS.PinnedMemoryLimit)...)
	}
	return errs
}

func percent(p *field.Path, v *int32) field.ErrorList {
	if v != nil && (*v < 1 || *v > 100) {
		return field.ErrorList{field.Invalid(p, *v, "must be between 1 and 100")}
	}
	return nil
}

func positive(p *field.Path, q *resource.Quantity) field.ErrorList {
	if q != nil && q.Sign() <= 0 {
		return field.ErrorList{field.Invalid(p, q.String(), "must be positive")}
	}
	return nil
}

// DecodeNicConfig decodes an rdma.strata.sh opaque config strictly, as
// DecodeGpuConfig does, and validates it.
func DecodeNicConfig(raw []byte) (*NicConfig, error) {
	cfg := &NicConfig{}
	if err := decode.Strict(raw, cfg); err != nil {
		return nil, fmt.Errorf("decode %s: %w", NicConfigKind, err)
	}
	if gvk := cfg.GroupVersionKind(); gvk != GroupVersion.WithKind(NicConfigKind) {
		return nil, fmt.Errorf("opaque config has apiVersion %q and kind %q, want %s and %s",
			cfg.APIVersion, cfg.Kind, GroupVersion.String(), NicConfigKind)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return cfg, nil
}

// Bounds of VF settings that hold for every port; the driver checks what
// depends on the port's link layer at prepare time.
const (
	MinVFMTU = 68
	MaxVFMTU = 9978
	// MinIBMTU and MaxIBMTU bound an IPoIB interface in datagram mode.
	MinIBMTU = 256
	MaxIBMTU = 4092
)

// Validate checks the config on its own; what depends on the port (link
// layer, rate) is checked by the driver at prepare time.
func (c *NicConfig) Validate() field.ErrorList {
	if c.VF == nil {
		return nil
	}
	var errs field.ErrorList
	p := field.NewPath("vf")
	v := c.VF
	if v.VLAN != nil && (*v.VLAN < 1 || *v.VLAN > 4094) {
		errs = append(errs, field.Invalid(p.Child("vlan"), *v.VLAN, "must be between 1 and 4094"))
	}
	// That vlanQoS needs a VLAN is checked on the merged settings of a
	// device (a DeviceClass may give the VLAN, a claim the priority).
	if v.VLANQoS != nil && (*v.VLANQoS < 0 || *v.VLANQoS > 7) {
		errs = append(errs, field.Invalid(p.Child("vlanQoS"), *v.VLANQoS, "must be between 0 and 7"))
	}
	if v.MTU != nil && (*v.MTU < MinVFMTU || *v.MTU > MaxVFMTU) {
		errs = append(errs, field.Invalid(p.Child("mtu"), *v.MTU, fmt.Sprintf("must be between %d and %d", MinVFMTU, MaxVFMTU)))
	}
	if q := v.MaxTxRate; q != nil {
		if q.Cmp(resource.MustParse("1M")) < 0 {
			errs = append(errs, field.Invalid(p.Child("maxTxRate"), q.String(), "must be at least 1M (bits per second)"))
		} else if q.Value()%1_000_000 != 0 {
			errs = append(errs, field.Invalid(p.Child("maxTxRate"), q.String(), "must be whole megabits per second"))
		}
	}
	return errs
}

// DecodeNpuConfig decodes an ascend.strata.sh opaque config strictly, as
// DecodeGpuConfig does, and validates it.
func DecodeNpuConfig(raw []byte) (*NpuConfig, error) {
	cfg := &NpuConfig{}
	if err := decode.Strict(raw, cfg); err != nil {
		return nil, fmt.Errorf("decode %s: %w", NpuConfigKind, err)
	}
	if gvk := cfg.GroupVersionKind(); gvk != GroupVersion.WithKind(NpuConfigKind) {
		return nil, fmt.Errorf("opaque config has apiVersion %q and kind %q, want %s and %s",
			cfg.APIVersion, cfg.Kind, GroupVersion.String(), NpuConfigKind)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return cfg, nil
}

// Validate checks the config.
func (c *NpuConfig) Validate() field.ErrorList {
	switch c.Driver {
	case "", NpuDriverMount, NpuDriverNone:
		return nil
	}
	return field.ErrorList{field.NotSupported(field.NewPath("driver"), c.Driver, []NpuDriverMode{NpuDriverMount, NpuDriverNone})}
}

// DecodeMluConfig decodes a cambricon.strata.sh opaque config strictly,
// as DecodeGpuConfig does, and validates it.
func DecodeMluConfig(raw []byte) (*MluConfig, error) {
	cfg := &MluConfig{}
	if err := decode.Strict(raw, cfg); err != nil {
		return nil, fmt.Errorf("decode %s: %w", MluConfigKind, err)
	}
	if gvk := cfg.GroupVersionKind(); gvk != GroupVersion.WithKind(MluConfigKind) {
		return nil, fmt.Errorf("opaque config has apiVersion %q and kind %q, want %s and %s",
			cfg.APIVersion, cfg.Kind, GroupVersion.String(), MluConfigKind)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return cfg, nil
}

// Validate checks the config.
func (c *MluConfig) Validate() field.ErrorList {
	switch c.Cnmon {
	case "", MluToolMount, MluToolNone:
		return nil
	}
	return field.ErrorList{field.NotSupported(field.NewPath("cnmon"), c.Cnmon, []MluToolMode{MluToolMount, MluToolNone})}
}
