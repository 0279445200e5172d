// Package linkmock stands in for the kernel's rtnetlink interface of one
// machine's NICs: the virtual-function settings each physical function
// holds and the interfaces' MTUs, with the kernel's refusals (unknown
// interface, VF index out of range, VLANs on InfiniBand, MTU out of the
// link layer's range). The state outlives a plugin restart, as the
// kernel's does.
package linkmock

import (
	"fmt"
	"sort"
	"sync"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/internal/linkctl"
)

// Links is the link state of one machine.
type Links struct {
	mu       sync.Mutex
	pfs      map[string]pf
	vfs      map[vfKey]linkctl.VFState
	mtu      map[string]int
	defaults map[string]int
	// sets counts SetVF calls, for tests that assert nothing was changed.
	sets int
	// onChange, if set, is called with the new state after each change.
	onChange func(Snapshot)
}

type pf struct {
	linkLayer string
	numVFs    int
}

type vfKey struct {
	pf string
	vf int
}

var _ linkctl.Control = (*Links)(nil)

// New returns the links of a machine with every VF at the kernel's
// defaults.
func New(m hardware.Machine) *Links {
	l := &Links{pfs: map[string]pf{}, vfs: map[vfKey]linkctl.VFState{}, mtu: map[string]int{}, defaults: map[string]int{}}
	for _, d := range m.RDMADevices() {
		mtu := 4092
		if d.NIC.LinkLayer == hardware.LinkEthernet {
			mtu = 1500
			if d.PF == "" {
				mtu = 9000
			}
		}
		l.mtu[d.NetDev], l.defaults[d.NetDev] = mtu, mtu
		if d.PF == "" {
			l.pfs[d.NetDev] = pf{linkLayer: d.NIC.LinkLayer, numVFs: d.NIC.NumVFs}
			for k := 0; k < d.NIC.NumVFs; k++ {
				l.vfs[vfKey{d.NetDev, k}] = linkctl.VFState{SpoofCheck: true}
			}
		}
	}
	return l
}

func (l *Links) vf(name string, vf int) (pf, error) {
	p, ok := l.pfs[name]
	if !ok {
		return pf{}, fmt.Errorf("interface %s: Link not found", name)
	}
	if vf < 0 || vf >= p.numVFs {
		return pf{}, fmt.Errorf("%s vf %d: invalid argument (%d VFs enabled)", name, vf, p.numVFs)
	}
	return p, nil
}

// VF implements linkctl.Control.
func (l *Links) VF(name string, vf int) (linkctl.VFState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.vf(name, vf); err != nil {
		return linkctl.VFState{}, err
	}
	return l.vfs[vfKey{name, vf}], nil
}

// SetVF implements linkctl.Control.
func (l *Links) SetVF(name string, vf int, s linkctl.VFState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := l.vf(name, vf)
	if err != nil {
		return err
	}
	if p.linkLayer == hardware.LinkInfiniBand && (s.VLAN != 0 || s.QoS != 0) {
		return fmt.Errorf("%s vf %d vlan %d: operation not supported", name, vf, s.VLAN)
	}
	l.vfs[vfKey{name, vf}] = s
	l.sets++
	l.changed()
	return nil
}

// MTU implements linkctl.Control.
func (l *Links) MTU(name string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.mtu[name]
	if !ok {
		return 0, fmt.Errorf("interface %s: Link not found", name)
	}
	return m, nil
}

// SetMTU implements linkctl.Control.
func (l *Links) SetMTU(name string, mtu int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.mtu[name]; !ok {
		return fmt.Errorf("interface %s: Link not found", name)
	}
	if mtu < 68 || mtu > 9978 {
		return fmt.Errorf("%s mtu %d: invalid argument", name, mtu)
	}
	l.mtu[name] = mtu
	l.changed()
	return nil
}

// Changed lists the VFs and interfaces not at their defaults, as
// "<pf> vf <n>" and "<ifname> mtu <m>".
func (l *Links) Changed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, s := range l.vfs {
		if s != (linkctl.VFState{SpoofCheck: true}) {
			out = append(out, fmt.Sprintf("%s vf %d %+v", k.pf, k.vf, s))
		}
	}
	for name, m := range l.mtu {
		if m != l.defaults[name] {
			out = append(out, fmt.Sprintf("%s mtu %d", name, m))
		}
	}
	sort.Strings(out)
	return out
}

// State returns a VF's settings and its interface's MTU.
func (l *Links) State(pfName string, vf int, vfNetdev string) (linkctl.VFState, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.vfs[vfKey{pfName, vf}], l.mtu[vfNetdev]
}

// Sets counts the VF changes made so far.
func (l *Links) Sets() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sets
}

// Snapshot is the link state a machine keeps while it is up: every VF's
// settings ("<pf>/<vf>") and every interface's MTU.
type Snapshot struct {
	VFs  map[string]linkctl.VFState `json:"vfs"`
	MTUs map[string]int             `json:"mtus"`
}

// Snapshot returns the state now.
func (l *Links) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}

func (l *Links) snapshotLocked() Snapshot {
	s := Snapshot{VFs: map[string]linkctl.VFState{}, MTUs: map[string]int{}}
	for k, v := range l.vfs {
		s.VFs[fmt.Sprintf("%s/%d", k.pf, k.vf)] = v
	}
	for name, m := range l.mtu {
		s.MTUs[name] = m
	}
	return s
}

// Restore puts the settings of s back: those of VFs and interfaces the
// machine has; others are ignored.
func (l *Links) Restore(s Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.vfs {
		if v, ok := s.VFs[fmt.Sprintf("%s/%d", k.pf, k.vf)]; ok {
			l.vfs[k] = v
		}
	}
	for name := range l.mtu {
		if m, ok := s.MTUs[name]; ok {
			l.mtu[name] = m
		}
	}
}

// OnChange calls fn with the state after every change, under the links'
// lock (fn must not call back).
func (l *Links) OnChange(fn func(Snapshot)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onChange = fn
}

func (l *Links) changed() {
	if l.onChange != nil {
		l.onChange(l.snapshotLocked())
	}
}
