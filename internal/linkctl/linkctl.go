// Package linkctl reads and changes network interfaces the way "ip link"
// does, for the RDMA backend: the settings a physical function holds for
// each of its virtual functions, and interfaces' MTUs. Control is what
// the backend takes; Netlink drives the host over rtnetlink, and
// hardware/linkmock is its fake. The package sits outside drivers/ so
// that the fake imports no driver package.
package linkctl

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// VFState is what a physical function holds for one of its virtual
// functions.
type VFState struct {
	VLAN, QoS  int
	Trust      bool
	SpoofCheck bool
	// MaxTxRateMbps is the transmit cap, 0 for none.
	MaxTxRateMbps int
}

// Control changes network interfaces the way "ip link" does. The plugin
// runs in the host's network namespace with CAP_NET_ADMIN.
type Control interface {
	// VF reads a virtual function's settings from its physical function
	// (pf is the PF's interface name).
	VF(pf string, vf int) (VFState, error)
	// SetVF applies every field of s to the virtual function.
	SetVF(pf string, vf int, s VFState) error
	// MTU and SetMTU read and set an interface's MTU.
	MTU(ifname string) (int, error)
	SetMTU(ifname string, mtu int) error
}

// Netlink is Control over rtnetlink.
type Netlink struct{}

var _ Control = Netlink{}

// VF implements Control.
func (Netlink) VF(pf string, vf int) (VFState, error) {
	link, err := netlink.LinkByName(pf)
	if err != nil {
		return VFState{}, fmt.Errorf("interface %s: %w", pf, err)
	}
	for _, v := range link.Attrs().Vfs {
		if v.ID == vf {
			return VFState{VLAN: v.Vlan, QoS: v.Qos, Trust: v.Trust != 0, SpoofCheck: v.Spoofchk, MaxTxRateMbps: int(v.MaxTxRate)}, nil
		}
	}
	return VFState{}, fmt.Errorf("interface %s has no VF %d", pf, vf)
}

// SetVF implements Control.
func (Netlink) SetVF(pf string, vf int, s VFState) error {
	link, err := netlink.LinkByName(pf)
	if err != nil {
		return fmt.Errorf("interface %s: %w", pf, err)
	}
	if err := netlink.LinkSetVfVlanQos(link, vf, s.VLAN, s.QoS); err != nil {
		return fmt.Errorf("%s vf %d vlan %d qos %d: %w", pf, vf, s.VLAN, s.QoS, err)
	}
	if err := netlink.LinkSetVfTrust(link, vf, s.Trust); err != nil {
		return fmt.Errorf("%s vf %d trust %t: %w", pf, vf, s.Trust, err)
	}
	if err := netlink.LinkSetVfSpoofchk(link, vf, s.SpoofCheck); err != nil {
		return fmt.Errorf("%s vf %d spoofchk %t: %w", pf, vf, s.SpoofCheck, err)
	}
	if err := netlink.LinkSetVfRate(link, vf, 0, s.MaxTxRateMbps); err != nil {
		return fmt.Errorf("%s vf %d max_tx_rate %d: %w", pf, vf, s.MaxTxRateMbps, err)
	}
	return nil
}

// MTU implements Control.
func (Netlink) MTU(ifname string) (int, error) {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w", ifname, err)
	}
	return link.Attrs().MTU, nil
}

// SetMTU implements Control.
func (Netlink) SetMTU(ifname string, mtu int) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifname, err)
	}
	if err := netlink.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("%s mtu %d: %w", ifname, mtu, err)
	}
	return nil
}
