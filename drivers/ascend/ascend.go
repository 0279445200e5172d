// Package ascend is the Huawei Ascend NPU backend of Strata's kubelet
// plugin (driver ascend.strata.sh). It publishes every NPU chip as a
// whole device and, for each virtualization template the chip offers
// (read from npu-smi at run time, never from a table), as many vNPU
// devices as the chip could hold of it. The whole chip and its vNPUs draw
// on one counter set per chip (AI cores, AI CPUs, memory), so whole and
// virtual use exclude each other and vNPUs never overcommit the chip.
// vNPUs are created with npu-smi when a claim is prepared and destroyed
// when it is unprepared; at start-up the plugin destroys the vNPUs its
// checkpoint says it made and no claim holds, and leaves every other one
// alone.
package ascend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
)

// DriverName is the DRA driver name of this backend.
const DriverName = "ascend.strata.sh"

// Tool is what the backend needs of npu-smi; *npusmi.Client is the real
// one.
type Tool interface {
	Chips(ctx context.Context) ([]npusmi.Chip, error)
	Templates(ctx context.Context, card, chip int) ([]npusmi.Template, error)
	// VNPUInfo is the chip's vNPU resources (free/total) and its vNPUs.
	VNPUInfo(ctx context.Context, card, chip int) (npusmi.VNPUInfo, error)
	// CreateVNPU makes a vNPU of a template with the given id.
	CreateVNPU(ctx context.Context, card, chip int, template string, id int) (npusmi.VNPU, error)
	DestroyVNPU(ctx context.Context, card, chip, id int) error
	// Health is the chip's health (npu-smi info -t health).
	Health(ctx context.Context, card, chip int) (npusmi.Health, error)
}

var _ Tool = (*npusmi.Client)(nil)

// Config wires the backend to the host.
type Config struct {
	Tool Tool
	// SysfsRoot is where sysfs is mounted ("" means /sys): PCI topology.
	SysfsRoot string
	// ProcRoot is where procfs is mounted ("" means /proc): device majors.
	ProcRoot string
	// DevRoot is prefixed to device node paths on the host ("" means /).
	DevRoot string
	// StateDir holds the ledger of vNPUs the plugin made (normally the
	// plugin data directory, shared by the instances of a rolling update).
	StateDir string
	// DriverRoot and NPUSMI are the host paths of the Ascend driver's
	// install root and of npu-smi, mounted into containers unless a
	// claim's NpuConfig says driver: None. Empty leaves them out.
	DriverRoot string
	NPUSMI     string
	// DCMIDir is the host path of the DCMI library folder that the
	// driver's tools load (/usr/local/dcmi on Ascend hosts), mounted with
	// the driver; empty leaves it out.
	DCMIDir string
	// HealthInterval is how often every chip's health is read (see
	// WatchHealth); 0 reads none and taints nothing.
	HealthInterval time.Duration
}

// npu is a discovered chip with what the backend derived from it.
type npu struct {
	npusmi.Chip
	family    string
	templates []npusmi.Template
	topology  pci.Topology
	// groups maps a group size to the id of the chip's HCCS group of
	// that size.
	groups map[int]string
	// usable is what vNPUs may use of the chip in all, by counter.
	usable map[string]int64
	// discoverErr is why the last Discover could not read the chip's
	// vNPU resources; its devices are then published tainted.
	discoverErr error
}

func (n *npu) chipID() int { return n.Chip.Chip }

// Backend implements plugin.Backend for Ascend NPUs.
type Backend struct {
	cfg  Config
	topo *pci.Reader

	// ledger records the vNPUs the plugin made.
	ledger *plugin.LedgerFile[vnpu, plugin.NoLedgerExtra]

	mu    sync.Mutex
	npus  []*npu
	byPhy map[int]*npu
	devs  map[string]*device
	major majors

	health accelerator.Health
}

var (
	_ plugin.Backend    = (*Backend)(nil)
	_ plugin.Validator  = (*Backend)(nil)
	_ plugin.Reconciler = (*Backend)(nil)
)

// New reads the node's chips and their templates.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Tool == nil {
		return nil, errors.New("npu-smi is required")
	}
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = pci.DefaultSysfsRoot
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/"
	}
	if cfg.StateDir == "" {
		return nil, errors.New("a state directory is required")
	}
	b := &Backend{cfg: cfg, topo: pci.NewReader(cfg.SysfsRoot), ledger: newLedger(cfg.StateDir), byPhy: map[int]*npu{}}
	var err error
	if b.major, err = readMajors(cfg.ProcRoot); err != nil {
		return nil, err
	}
	chips, err := cfg.Tool.Chips(ctx)
	if err != nil {
		return nil, fmt.Errorf("npu-smi: %w", err)
	}
	for _, c := range chips {
		n := &npu{Chip: c, family: family(c.Name), topology: pci.Topology{NUMANode: -1}}
		if c.BusID != "" {
			if n.topology, err = b.topo.Lookup(c.BusID); err != nil {
				return nil, fmt.Errorf("NPU %d: PCI topology: %w", c.PhyID, err)
			}
		}
		if n.templates, err = cfg.Tool.Templates(ctx, c.Card, c.Chip); err != nil {
			return nil, fmt.Errorf("NPU %d: vNPU templates: %w", c.PhyID, err)
		}
		b.npus = append(b.npus, n)
		b.byPhy[c.PhyID] = n
	}
	assignHCCSGroups(b.npus)
	if cfg.HealthInterval > 0 {
		// The first publish already taints what is unhealthy.
		b.probeHealth(ctx)
	}
	return b, nil
}
