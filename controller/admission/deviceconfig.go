package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
)

const (
	// nvidiaDriver is the driver whose opaque configs are Strata's
	// (drivers/nvidia.DriverName, which this package does not link).
	nvidiaDriver = "nvidia.strata.sh"
	// migClass is the DeviceClass of MIG devices, which take no sharing
	// configuration.
	migClass = "nvidia-mig.strata.sh"
)

// validateDeviceConfigs checks the nvidia.strata.sh opaque configs of a
// ResourceClaim (spec.devices.config), a ResourceClaimTemplate
// (spec.spec.devices.config) or a DeviceClass (spec.config): each decodes
// strictly into a GpuConfig, and none asks for sharing on a MIG device.
// Other drivers' configs are allowed as they are.
func validateDeviceConfigs(_ context.Context, req admission.Request) admission.Response {
	if req.Kind.Group != resourcev1.GroupName || req.Kind.Version != "v1" {
		return admission.Allowed("").WithWarnings(fmt.Sprintf("strata-controller validates resource.k8s.io/v1 only, not %s/%s", req.Kind.Group, req.Kind.Version))
	}
	switch req.Kind.Kind {
	case "ResourceClaim":
		return review(req, func(raw []byte) (field.ErrorList, error) {
			var c resourcev1.ResourceClaim
			if err := decode(raw, &c); err != nil {
				return nil, err
			}
			return claimErrors(field.NewPath("spec", "devices"), &c.Spec.Devices), nil
		})
	case "ResourceClaimTemplate":
		return review(req, func(raw []byte) (field.ErrorList, error) {
			var t resourcev1.ResourceClaimTemplate
			if err := decode(raw, &t); err != nil {
				return nil, err
			}
			return claimErrors(field.NewPath("spec", "spec", "devices"), &t.Spec.Spec.Devices), nil
		})
	case "DeviceClass":
		return review(req, func(raw []byte) (field.ErrorList, error) {
			var c resourcev1.DeviceClass
			if err := decode(raw, &c); err != nil {
				return nil, err
			}
			return classErrors(c.Name, &c.Spec), nil
		})
	}
	return admission.Allowed("").WithWarnings("strata-controller does not validate " + req.Kind.Kind)
}

// gpuConfig decodes an nvidia.strata.sh opaque config; nil for another
// driver's, or when the config is wrong (the error list says why).
func gpuConfig(p *field.Path, c resourcev1.DeviceConfiguration) (*configv1alpha1.GpuConfig, field.ErrorList) {
	if c.Opaque == nil || c.Opaque.Driver != nvidiaDriver {
		return nil, nil
	}
	pp := p.Child("opaque", "parameters")
	cfg, err := configv1alpha1.DecodeGpuConfig(c.Opaque.Parameters.Raw)
	if err != nil {
		return nil, field.ErrorList{wrapped(pp, err.Error())}
	}
	return cfg, nil
}

// shares says whether a config has a sharing section. A MIG device
// takes none at all, not even strategy None: the driver refuses any at
// prepare time, and admission refuses what prepare would.
func shares(cfg *configv1alpha1.GpuConfig) bool {
	return cfg != nil && cfg.Sharing != nil
}

// claimErrors checks the configs of a claim's devices (p is the path of
// spec.devices).
func claimErrors(p *field.Path, d *resourcev1.DeviceClaim) field.ErrorList {
	var errs field.ErrorList
	for i, c := range d.Config {
		cp := p.Child("config").Index(i)
		cfg, cfgErrs := gpuConfig(cp, c.DeviceConfiguration)
		errs = append(errs, cfgErrs...)
		if !shares(cfg) {
			continue
		}
		if mig := migRequests(d.Requests, c.Requests); len(mig) > 0 {
			errs = append(errs, field.Forbidden(cp.Child("opaque", "parameters", "sharing"),
				fmt.Sprintf("only GPUs take a sharing configuration; request %s asks for MIG devices (deviceClassName %s)", strings.Join(mig, ", "), migClass)))
		}
	}
	return errs
}

// migRequests returns the requests and subrequests a config applies to
// (targets, "request" or "request/subrequest"; every request when empty)
// that may be given a MIG device.
func migRequests(requests []resourcev1.DeviceRequest, targets []string) []string {
	applies := func(name string) bool { return len(targets) == 0 || slices.Contains(targets, name) }
	var out []string
	for _, r := range requests {
		if r.Exactly != nil && r.Exactly.DeviceClassName == migClass && applies(r.Name) {
			out = append(out, fmt.Sprintf("%q", r.Name))
		}
		for _, s := range r.FirstAvailable {
			if s.DeviceClassName == migClass && (applies(r.Name) || applies(r.Name+"/"+s.Name)) {
				out = append(out, fmt.Sprintf("%q", r.Name+"/"+s.Name))
			}
		}
	}
	return out
}

// classErrors checks a DeviceClass's configs; the MIG class takes no
// sharing.
func classErrors(name string, spec *resourcev1.DeviceClassSpec) field.ErrorList {
	var errs field.ErrorList
	for i, c := range spec.Config {
		cp := field.NewPath("spec", "config").Index(i)
		cfg, cfgErrs := gpuConfig(cp, c.DeviceConfiguration)
		errs = append(errs, cfgErrs...)
		if name == migClass && shares(cfg) {
			errs = append(errs, field.Forbidden(cp.Child("opaque", "parameters", "sharing"),
				fmt.Sprintf("only GPUs take a sharing configuration; DeviceClass %s selects MIG devices", migClass)))
		}
	}
	return errs
}
