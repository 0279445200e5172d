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

// The drivers whose opaque configs are Strata's (drivers/nvidia.DriverName
// and the RDMA, Ascend and Cambricon drivers', which this package does not
// link), and the DeviceClasses whose devices refuse a section of them.
const (
	nvidiaDriver = "nvidia.strata.sh"
	// migClass is the DeviceClass of MIG devices, which take no sharing
	// configuration.
	migClass = "nvidia-mig.strata.sh"

	rdmaDriver = "rdma.strata.sh"
	// nicClass is the DeviceClass of RDMA NICs (physical functions),
	// which take no vf section: only virtual functions do.
	nicClass = "rdma-nic.strata.sh"
	// vfClass is the DeviceClass of SR-IOV virtual functions, which do.
	vfClass = "rdma-vf.strata.sh"

	ascendDriver = "ascend.strata.sh"

	cambriconDriver = "cambricon.strata.sh"
)

// configRule is what admission checks of one driver's opaque configs:
// they decode strictly, and a section that only some devices take is
// refused where it applies to a DeviceClass of other devices.
type configRule struct {
	driver string
	// decode decodes and validates the parameters, as the kubelet plugin
	// does, and says whether they have the section.
	decode func(raw []byte) (hasSection bool, err error)
	// section is the field under opaque.parameters, only says who takes
	// it, class is the DeviceClass whose devices do not and devices
	// names them.
	section, only, class, devices string
}

var configRules = []configRule{
	{
		driver: nvidiaDriver,
		// A MIG device takes no sharing section at all, not even strategy
		// None: the driver refuses any at prepare time, and admission
		// refuses what prepare would.
		decode: func(raw []byte) (bool, error) {
			cfg, err := configv1alpha1.DecodeGpuConfig(raw)
			return err == nil && cfg.Sharing != nil, err
		},
		section: "sharing", only: "only GPUs take a sharing configuration",
		class: migClass, devices: "MIG devices",
	},
	{
		driver: rdmaDriver,
		// VLAN, trust, spoof check and rate are set by a physical
		// function on one of its virtual functions; a NIC claimed whole
		// or by bandwidth has none to set.
		decode: func(raw []byte) (bool, error) {
			cfg, err := configv1alpha1.DecodeNicConfig(raw)
			return err == nil && cfg.VF != nil, err
		},
		section: "vf", only: "only SR-IOV virtual functions (DeviceClass " + vfClass + ") take a vf section",
		class: nicClass, devices: "RDMA NICs",
	},
	{
		driver: ascendDriver,
		// Every Ascend device takes every NpuConfig field.
		decode: func(raw []byte) (bool, error) {
			_, err := configv1alpha1.DecodeNpuConfig(raw)
			return false, err
		},
	},
	{
		driver: cambriconDriver,
		// Every Cambricon allocation, a whole card or an sMLU of one,
		// takes every MluConfig field.
		decode: func(raw []byte) (bool, error) {
			_, err := configv1alpha1.DecodeMluConfig(raw)
			return false, err
		},
	},
}

// validateDeviceConfigs checks the opaque configs of Strata's drivers in
// a ResourceClaim (spec.devices.config), a ResourceClaimTemplate
// (spec.spec.devices.config) or a DeviceClass (spec.config): an
// nvidia.strata.sh config decodes strictly into a GpuConfig and asks for
// no sharing on a MIG device; an rdma.strata.sh config decodes strictly
// into a NicConfig and has no vf section for a NIC; an ascend.strata.sh
// config decodes strictly into an NpuConfig and a cambricon.strata.sh
// config into an MluConfig. Other drivers' configs are allowed as they
// are.
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

// checkConfig decodes an opaque config of one of Strata's drivers (p is
// the path of the config entry). It returns the driver's rule when the
// config has the rule's section, nil for another driver's config or one
// without the section; the error list says why a config is wrong.
func checkConfig(p *field.Path, c resourcev1.DeviceConfiguration) (*configRule, field.ErrorList) {
	if c.Opaque == nil {
		return nil, nil
	}
	for i := range configRules {
		rule := &configRules[i]
		if c.Opaque.Driver != rule.driver {
			continue
		}
		has, err := rule.decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, field.ErrorList{wrapped(p.Child("opaque", "parameters"), err.Error())}
		}
		if has {
			return rule, nil
		}
		return nil, nil
	}
	return nil, nil
}

// claimErrors checks the configs of a claim's devices (p is the path of
// spec.devices).
func claimErrors(p *field.Path, d *resourcev1.DeviceClaim) field.ErrorList {
	var errs field.ErrorList
	for i, c := range d.Config {
		cp := p.Child("config").Index(i)
		rule, cfgErrs := checkConfig(cp, c.DeviceConfiguration)
		errs = append(errs, cfgErrs...)
		if rule == nil {
			continue
		}
		if refused := classRequests(d.Requests, c.Requests, rule.class); len(refused) > 0 {
			errs = append(errs, field.Forbidden(cp.Child("opaque", "parameters", rule.section),
				fmt.Sprintf("%s; request %s asks for %s (deviceClassName %s)", rule.only, strings.Join(refused, ", "), rule.devices, rule.class)))
		}
	}
	return errs
}

// classRequests returns the requests and subrequests a config applies to
// (targets, "request" or "request/subrequest"; every request when empty)
// that may be given a device of class.
func classRequests(requests []resourcev1.DeviceRequest, targets []string, class string) []string {
	applies := func(name string) bool { return len(targets) == 0 || slices.Contains(targets, name) }
	var out []string
	for _, r := range requests {
		if r.Exactly != nil && r.Exactly.DeviceClassName == class && applies(r.Name) {
			out = append(out, fmt.Sprintf("%q", r.Name))
		}
		for _, s := range r.FirstAvailable {
			if s.DeviceClassName == class && (applies(r.Name) || applies(r.Name+"/"+s.Name)) {
				out = append(out, fmt.Sprintf("%q", r.Name+"/"+s.Name))
			}
		}
	}
	return out
}

// classErrors checks a DeviceClass's configs; the MIG class takes no
// sharing, the NIC class no vf section.
func classErrors(name string, spec *resourcev1.DeviceClassSpec) field.ErrorList {
	var errs field.ErrorList
	for i, c := range spec.Config {
		cp := field.NewPath("spec", "config").Index(i)
		rule, cfgErrs := checkConfig(cp, c.DeviceConfiguration)
		errs = append(errs, cfgErrs...)
		if rule != nil && name == rule.class {
			errs = append(errs, field.Forbidden(cp.Child("opaque", "parameters", rule.section),
				fmt.Sprintf("%s; DeviceClass %s selects %s", rule.only, rule.class, rule.devices)))
		}
	}
	return errs
}
