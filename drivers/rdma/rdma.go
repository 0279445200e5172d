// Package rdma is the RDMA NIC backend of Strata's kubelet plugin (driver
// rdma.strata.sh). It discovers RDMA NICs and their SR-IOV virtual
// functions from sysfs alone and publishes
//
//   - each physical function as one device that several claims may share,
//     with consumable capacity "bandwidth" (bits per second): a claim
//     that asks for none gets the whole port rate, so it has the NIC to
//     itself; claims asking for part of it share the NIC, and the
//     scheduler never lets their reservations exceed the port rate;
//   - each enabled virtual function as a device of its own, configured
//     per claim (VLAN, trust, spoof check, rate limit, MTU) through the
//     physical function and reset when the claim is unprepared.
//
// Both carry the topology attributes every Strata driver publishes
// (package pci: pcieRoot, pciBusID, numaNode, topology.strata.sh/
// pcieSwitch), so one claim can ask for a GPU and the NIC on its PCIe
// switch with matchAttribute. Prepare hands containers the RDMA character
// devices (uverbs, rdma_cm and, on InfiniBand, umad) through CDI, and a
// virtual function's network interface through CDI netDevices.
package rdma

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/linkctl"
)

// DriverName is the DRA driver name of this backend.
const DriverName = "rdma.strata.sh"

// Link layers as sysfs reports them.
const (
	linkInfiniBand = "InfiniBand"
	linkEthernet   = "Ethernet"
)

// DefaultHealthInterval is how often port states are read.
const DefaultHealthInterval = 5 * time.Second

// Config wires the backend to the host.
type Config struct {
	// SysfsRoot is where sysfs is mounted ("" means /sys).
	SysfsRoot string
	// DevRoot is prefixed to device node paths on the host ("" means /).
	DevRoot string
	// Links sets virtual function parameters and MTUs (netlink on a real
	// host).
	Links linkctl.Control
	// RailDevices lists the RDMA devices of the physical functions in
	// rail order; empty numbers rails in PCI address order.
	RailDevices []string
	// HealthInterval is how often port states are read.
	HealthInterval time.Duration
}

// Backend implements plugin.Backend for RDMA NICs.
type Backend struct {
	cfg  Config
	topo *pci.Reader

	mu     sync.Mutex
	ports  []*port
	byName map[string]*port
	rdmaCM devNumber
	// states are the port states last published, by device name.
	states map[string]string
	// probes counts the health checks made, so that a test can tell a
	// quiet port from a watcher that never looked.
	probes atomic.Int64
}

var (
	_ plugin.Backend       = (*Backend)(nil)
	_ plugin.Validator     = (*Backend)(nil)
	_ plugin.HealthWatcher = (*Backend)(nil)
	_ plugin.Configurable  = (*Backend)(nil)
)

// New checks the configuration; devices are read by Discover.
func New(cfg Config) (*Backend, error) {
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = pci.DefaultSysfsRoot
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/"
	}
	if cfg.Links == nil {
		return nil, errors.New("a link control (netlink) is required")
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	b := &Backend{cfg: cfg, topo: pci.NewReader(cfg.SysfsRoot), byName: map[string]*port{}, states: map[string]string{}}
	if err := b.refresh(); err != nil {
		return nil, err
	}
	return b, nil
}

// refresh reads the ports from sysfs.
func (b *Backend) refresh() error {
	ports, cm, err := discoverPorts(b.cfg.SysfsRoot, b.topo, b.cfg.RailDevices)
	if err != nil {
		return err
	}
	byName := make(map[string]*port, len(ports))
	for _, p := range ports {
		p.name = deviceName(p)
		byName[p.name] = p
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ports, b.byName, b.rdmaCM = ports, byName, cm
	return nil
}

// deviceName is stable across reboots: the PCI address, not the kernel's
// enumeration-order RDMA name.
func deviceName(p *port) string {
	kind := "nic"
	if p.isVF() {
		kind = "vf"
	}
	return kind + "-" + strings.NewReplacer(":", "-", ".", "-").Replace(p.busID)
}

// Discover reports the NICs and virtual functions of the node.
func (b *Backend) Discover(ctx context.Context) (*plugin.Inventory, error) {
	if err := b.refresh(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	inv := &plugin.Inventory{}
	for _, p := range b.ports {
		inv.Devices = append(inv.Devices, buildDevice(p))
		b.states[p.name] = p.state
	}
	klog.FromContext(ctx).V(4).Info("Discovered RDMA devices", "count", len(inv.Devices))
	return inv, nil
}

// WatchHealth reads the port states every interval and reports a change
// (a port going down or coming back), which republishes the slices with
// the down ports tainted.
func (b *Backend) WatchHealth(ctx context.Context, changed func()) {
	t := time.NewTicker(b.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if b.statesChanged() {
			changed()
		}
	}
}

func (b *Backend) statesChanged() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.probes.Add(1)
	for _, p := range b.ports {
		dir := b.cfg.SysfsRoot + "/class/infiniband/" + p.rdmaDev + "/ports/1/state"
		if s := stateName(readTrim(dir)); s != b.states[p.name] {
			return true
		}
	}
	return false
}

func (b *Backend) port(name string) (*port, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.byName[name]
	if !ok {
		return nil, fmt.Errorf("device %s is not an RDMA device of this node", name)
	}
	return p, nil
}

// linkDefaults is what a virtual function has when nobody configured it:
// no VLAN, not trusted, spoof check on, no rate limit.
func linkDefaults() linkctl.VFState { return linkctl.VFState{SpoofCheck: true} }

// defaultMTU is a VF interface's MTU when nobody set it.
func defaultMTU(linkLayer string) int {
	if linkLayer == linkInfiniBand {
		return 4092
	}
	return 1500
}

func (p *port) model() string {
	if p.pf != nil {
		return models[p.pf.deviceID]
	}
	return models[p.deviceID]
}

// resourceName is a port's bandwidth capacity.
const resourceName resourceapi.QualifiedName = "bandwidth"
