package rdma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/linkctl"
)

// vfState is what the checkpoint keeps of a configured virtual function,
// to put it back as it was.
type vfState struct {
	PF       string          `json:"pf"`
	VF       int             `json:"vf"`
	Netdev   string          `json:"netdev"`
	Previous linkctl.VFState `json:"previous"`
	// PreviousMTU is 0 when the claim left the MTU alone.
	PreviousMTU int `json:"previousMTU,omitempty"`
}

// Validate refuses a claim whose configs cannot apply to its devices,
// before anything is recorded or touched.
func (b *Backend) Validate(_ context.Context, req *plugin.PrepareRequest) error {
	var errs []error
	for _, a := range req.Devices {
		if _, _, err := b.resolve(a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// configHandler decodes NicConfigs for the plugin core.
type configHandler struct{}

// ConfigHandler implements plugin.Configurable.
func (b *Backend) ConfigHandler() plugin.ConfigHandler { return configHandler{} }

// Decode implements plugin.ConfigHandler.
func (configHandler) Decode(raw []byte) (any, error) {
	return configv1alpha1.DecodeNicConfig(raw)
}

// Effective implements plugin.ConfigHandler: the VF settings of later
// configs (the claim's) over earlier ones (the class's), field by field.
// What depends on the port is checked at Validate.
func (configHandler) Effective(configs []any) (any, error) {
	out := &configv1alpha1.NicConfig{}
	for _, c := range configs {
		if vf := c.(*configv1alpha1.NicConfig).VF; vf != nil {
			out.VF = mergeVF(out.VF, vf)
		}
	}
	return out, nil
}

// resolve finds a device's port and the VF settings its config asks for
// (nil for none), checked against the port.
func (b *Backend) resolve(a plugin.AllocatedDevice) (*port, *configv1alpha1.VFConfig, error) {
	p, err := b.port(a.Device)
	if err != nil {
		return nil, nil, err
	}
	cfg, _ := a.Config.(*configv1alpha1.NicConfig)
	if cfg == nil || cfg.VF == nil {
		return p, nil, nil
	}
	vf := cfg.VF
	if errs := checkVF(p, vf); len(errs) > 0 {
		return nil, nil, fmt.Errorf("request %s, device %s: %w", a.Request, p.name, errs.ToAggregate())
	}
	return p, vf, nil
}

// mergeVF lays over the fields the higher-precedence config sets.
func mergeVF(base, over *configv1alpha1.VFConfig) *configv1alpha1.VFConfig {
	if base == nil {
		return over.DeepCopy()
	}
	out := base.DeepCopy()
	if over.VLAN != nil {
		out.VLAN = over.VLAN
	}
	if over.VLANQoS != nil {
		out.VLANQoS = over.VLANQoS
	}
	if over.Trust != nil {
		out.Trust = over.Trust
	}
	if over.SpoofCheck != nil {
		out.SpoofCheck = over.SpoofCheck
	}
	if over.MTU != nil {
		out.MTU = over.MTU
	}
	if over.MaxTxRate != nil {
		out.MaxTxRate = over.MaxTxRate
	}
	return out
}

// checkVF checks VF settings against the device they are for.
func checkVF(p *port, vf *configv1alpha1.VFConfig) field.ErrorList {
	path := field.NewPath("vf")
	if !p.isVF() {
		return field.ErrorList{field.Forbidden(path, fmt.Sprintf("device %s is a physical function; VF settings apply to virtual functions only (DeviceClass rdma-vf.strata.sh)", p.name))}
	}
	var errs field.ErrorList
	// Checked on the merged settings: a class may give the VLAN and a
	// claim its priority.
	if vf.VLANQoS != nil && vf.VLAN == nil {
		errs = append(errs, field.Required(path.Child("vlan"), "vlanQoS needs a VLAN"))
	}
	if p.linkLayer == linkInfiniBand {
		if vf.VLAN != nil {
			errs = append(errs, field.Forbidden(path.Child("vlan"), fmt.Sprintf("device %s is on an InfiniBand port; VLANs are Ethernet only", p.name)))
		}
		if vf.SpoofCheck != nil {
			errs = append(errs, field.Forbidden(path.Child("spoofCheck"), fmt.Sprintf("device %s is on an InfiniBand port; MAC spoof checking is Ethernet only", p.name)))
		}
		if vf.MTU != nil && (*vf.MTU < configv1alpha1.MinIBMTU || *vf.MTU > configv1alpha1.MaxIBMTU) {
			errs = append(errs, field.Invalid(path.Child("mtu"), *vf.MTU, fmt.Sprintf("device %s is on an InfiniBand port: IPoIB takes %d to %d", p.name, configv1alpha1.MinIBMTU, configv1alpha1.MaxIBMTU)))
		}
	}
	if q := vf.MaxTxRate; q != nil && p.rateGbps > 0 && q.Value() > p.rateGbps*1_000_000_000 {
		errs = append(errs, field.Invalid(path.Child("maxTxRate"), q.String(), fmt.Sprintf("exceeds the port rate of device %s (%dG)", p.name, p.rateGbps)))
	}
	return errs
}

// vfTarget is VF settings resolved against the current ones.
func vfTarget(current linkctl.VFState, vf *configv1alpha1.VFConfig) linkctl.VFState {
	s := current
	if vf.VLAN != nil {
		s.VLAN = int(*vf.VLAN)
	}
	if vf.VLANQoS != nil {
		s.QoS = int(*vf.VLANQoS)
	}
	if vf.Trust != nil {
		s.Trust = *vf.Trust
	}
	if vf.SpoofCheck != nil {
		s.SpoofCheck = *vf.SpoofCheck
	}
	if vf.MaxTxRate != nil {
		s.MaxTxRateMbps = int(vf.MaxTxRate.Value() / 1_000_000)
	}
	return s
}

// Prepare configures the claim's virtual functions and returns the CDI
// edits of its devices. On error, what was configured is put back.
func (b *Backend) Prepare(ctx context.Context, req *plugin.PrepareRequest) (*plugin.PrepareResponse, error) {
	resp := &plugin.PrepareResponse{}
	var hcas []string
	for _, a := range req.Devices {
		p, vf, err := b.resolve(a)
		if err == nil {
			var d plugin.PreparedDevice
			d, err = b.prepareDevice(ctx, a, p, vf)
			resp.Devices = append(resp.Devices, d)
			hcas = append(hcas, p.rdmaDev)
		}
		if err != nil {
			if uerr := b.Unprepare(ctx, plugin.ClaimRefOf(req.Claim), resp.Devices); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undo: %w", uerr))
			}
			return nil, err
		}
	}
	resp.Common = b.commonEdits(hcas)
	return resp, nil
}

func (b *Backend) prepareDevice(ctx context.Context, a plugin.AllocatedDevice, p *port, vf *configv1alpha1.VFConfig) (plugin.PreparedDevice, error) {
	d := a.Prepared()
	d.Edits.DeviceNodes = append(d.Edits.DeviceNodes, b.node(fmt.Sprintf("uverbs%d", p.verbsIndex), p.verbs))
	if p.umad.valid() {
		d.Edits.DeviceNodes = append(d.Edits.DeviceNodes, b.node(fmt.Sprintf("umad%d", p.umadIndex), p.umad))
	}
	if !p.isVF() {
		return d, nil
	}
	if p.netdev != "" {
		d.Edits.NetDevices = []*cdispec.LinuxNetDevice{{HostInterfaceName: p.netdev, Name: p.netdev}}
	}
	if vf == nil {
		return d, nil
	}
	current, err := b.cfg.Links.VF(p.pf.netdev, p.vfIndex)
	if err != nil {
		return d, err
	}
	st := vfState{PF: p.pf.netdev, VF: p.vfIndex, Netdev: p.netdev, Previous: current}
	if vf.MTU != nil {
		if st.PreviousMTU, err = b.cfg.Links.MTU(p.netdev); err != nil {
			return d, err
		}
	}
	// Record before touching anything, so a failure below is undone.
	if d.State, err = json.Marshal(st); err != nil {
		return d, err
	}
	if err := b.cfg.Links.SetVF(p.pf.netdev, p.vfIndex, vfTarget(current, vf)); err != nil {
		return d, err
	}
	if vf.MTU != nil {
		if err := b.cfg.Links.SetMTU(p.netdev, int(*vf.MTU)); err != nil {
			return d, err
		}
	}
	klog.FromContext(ctx).V(3).Info("Configured VF", "device", p.name, "pf", p.pf.netdev, "vf", p.vfIndex)
	return d, nil
}

// Unprepare puts each configured virtual function back as it was. A VF
// whose prepare was interrupted before its state was recorded is reset
// to the kernel's defaults.
func (b *Backend) Unprepare(ctx context.Context, _ plugin.ClaimRef, devices []plugin.PreparedDevice) error {
	var errs []error
	for _, d := range devices {
		var st vfState
		if len(d.State) > 0 {
			// The recorded state names the links, so a VF whose RDMA
			// device is gone from sysfs (driver reloaded) is still put
			// back.
			if err := json.Unmarshal(d.State, &st); err != nil {
				errs = append(errs, fmt.Errorf("device %s: state: %w", d.Device, err))
				continue
			}
		} else {
			p, err := b.port(d.Device)
			if err != nil || !p.isVF() || d.Edits.NetDevices != nil {
				continue // gone, a PF, or prepared without settings: nothing to undo
			}
			st = vfState{PF: p.pf.netdev, VF: p.vfIndex, Netdev: p.netdev, Previous: linkDefaults(), PreviousMTU: defaultMTU(p.linkLayer)}
		}
		if err := b.cfg.Links.SetVF(st.PF, st.VF, st.Previous); err != nil {
			errs = append(errs, fmt.Errorf("device %s: %w", d.Device, err))
		}
		if st.PreviousMTU > 0 {
			if err := b.cfg.Links.SetMTU(st.Netdev, st.PreviousMTU); err != nil {
				errs = append(errs, fmt.Errorf("device %s: %w", d.Device, err))
			}
		}
		klog.FromContext(ctx).V(3).Info("Reset VF", "device", d.Device)
	}
	return errors.Join(errs...)
}

// commonEdits are what every container using one of the claim's RDMA
// devices gets: the connection manager, and the HCAs named for NCCL and
// UCX so that they use exactly the claim's devices.
func (b *Backend) commonEdits(hcas []string) cdispec.ContainerEdits {
	edits := cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{b.node("rdma_cm", b.rdmaCM)}}
	if len(hcas) == 0 {
		return edits
	}
	sort.Strings(hcas)
	hcas = compactStrings(hcas)
	ucx := make([]string, len(hcas))
	for i, h := range hcas {
		ucx[i] = h + ":1"
	}
	edits.Env = []string{
		"NCCL_IB_HCA==" + strings.Join(hcas, ","),
		"UCX_NET_DEVICES=" + strings.Join(ucx, ","),
	}
	return edits
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// node is the character device /dev/infiniband/<name>.
func (b *Backend) node(name string, n devNumber) *cdispec.DeviceNode {
	return plugin.CharDeviceNode(b.cfg.DevRoot, "/dev/infiniband/"+name, n.major, n.minor)
}
