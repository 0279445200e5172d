package linkmock

import (
	"strings"
	"testing"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/internal/linkctl"
)

func TestDefaults(t *testing.T) {
	tests := []struct {
		machine      hardware.Machine
		pf, vfNetdev string
		pfMTU, vfMTU int
		numVFs       int
	}{
		{hardware.DGXH100(), "ibp24s0", "ibp24s0v3", 4092, 4092, 4},
		{hardware.HGXH100CPUNICs(), "enp41s0np0", "enp41s0np0v0", 9000, 1500, 4},
	}
	for _, tc := range tests {
		t.Run(tc.machine.Name, func(t *testing.T) {
			l := New(tc.machine)
			if c := l.Changed(); len(c) != 0 {
				t.Errorf("fresh links changed: %v", c)
			}
			for k := 0; k < tc.numVFs; k++ {
				if s, err := l.VF(tc.pf, k); err != nil || s != (linkctl.VFState{SpoofCheck: true}) {
					t.Errorf("VF %d of %s = %+v, %v; want the kernel's defaults", k, tc.pf, s, err)
				}
			}
			if _, err := l.VF(tc.pf, tc.numVFs); err == nil {
				t.Errorf("VF %d of %s exists, only %d are enabled", tc.numVFs, tc.pf, tc.numVFs)
			}
			if m, err := l.MTU(tc.pf); err != nil || m != tc.pfMTU {
				t.Errorf("%s mtu %d, %v; want %d", tc.pf, m, err, tc.pfMTU)
			}
			if m, err := l.MTU(tc.vfNetdev); err != nil || m != tc.vfMTU {
				t.Errorf("%s mtu %d, %v; want %d", tc.vfNetdev, m, err, tc.vfMTU)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	ib := hardware.DGXH100()
	eth := hardware.HGXH100CPUNICs()
	tests := []struct {
		name    string
		machine hardware.Machine
		do      func(l *Links) error
		want    string
	}{
		{"unknown PF", eth, func(l *Links) error { return l.SetVF("eth9", 0, linkctl.VFState{}) }, "eth9"},
		{"VF out of range", eth, func(l *Links) error { return l.SetVF("enp41s0np0", 4, linkctl.VFState{}) }, "vf 4"},
		{"negative VF", eth, func(l *Links) error { return l.SetVF("enp41s0np0", -1, linkctl.VFState{}) }, "vf -1"},
		{"VLAN on InfiniBand", ib, func(l *Links) error { return l.SetVF("ibp24s0", 0, linkctl.VFState{VLAN: 5}) }, "not supported"},
		{"QoS on InfiniBand", ib, func(l *Links) error { return l.SetVF("ibp24s0", 0, linkctl.VFState{QoS: 1}) }, "not supported"},
		{"MTU too large", eth, func(l *Links) error { return l.SetMTU("enp41s0np0v0", 9979) }, "mtu 9979"},
		{"MTU too small", ib, func(l *Links) error { return l.SetMTU("ibp24s0v0", 67) }, "mtu 67"},
		{"unknown interface MTU", ib, func(l *Links) error { return l.SetMTU("ib0", 1500) }, "ib0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(tc.machine)
			err := tc.do(l)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
			if c, s := l.Changed(), l.Sets(); len(c) != 0 || s != 0 {
				t.Errorf("a refused change left %v (%d sets)", c, s)
			}
		})
	}
}

func TestChangedAndRestored(t *testing.T) {
	l := New(hardware.HGXH100CPUNICs())
	set := linkctl.VFState{VLAN: 100, QoS: 2, Trust: true, MaxTxRateMbps: 1000}
	if err := l.SetVF("enp41s0np0", 2, set); err != nil {
		t.Fatal(err)
	}
	if err := l.SetMTU("enp41s0np0v2", 9000); err != nil {
		t.Fatal(err)
	}
	if s, mtu := l.State("enp41s0np0", 2, "enp41s0np0v2"); s != set || mtu != 9000 {
		t.Errorf("state %+v mtu %d, want %+v mtu 9000", s, mtu, set)
	}
	if c := l.Changed(); len(c) != 2 || !strings.HasPrefix(c[0], "enp41s0np0 vf 2 ") || c[1] != "enp41s0np0v2 mtu 9000" {
		t.Errorf("changed %q", c)
	}
	if err := l.SetVF("enp41s0np0", 2, linkctl.VFState{SpoofCheck: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetMTU("enp41s0np0v2", 1500); err != nil {
		t.Fatal(err)
	}
	if c := l.Changed(); len(c) != 0 {
		t.Errorf("back at defaults, still changed: %v", c)
	}
	if got := l.Sets(); got != 2 {
		t.Errorf("%d sets counted, want 2", got)
	}
}
