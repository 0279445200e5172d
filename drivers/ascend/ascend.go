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

	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// DriverName is the DRA driver name of this backend.
const DriverName = "ascend.strata.sh"

// Tool is what the backend needs of npu-smi; *npusmi.Client is the real
// one.
type Tool interface {
	// Chips lists the chips npu-smi can describe and why it cannot
	// describe the others it lists; err is the listing failing.
	Chips(ctx context.Context) (chips []npusmi.Chip, unreadable []*npusmi.ChipError, err error)
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
	// foreign are the templates of the vNPUs on the chip that the
	// plugin did not make, as last read.
	foreign []npusmi.Template
	// discoverErr is why the last Discover could not read the chip's
	// vNPU resources (npu-smi failed on it, or timed out on a chip before
	// it in that publish); its devices are then published tainted, from
	// what was last read of it.
	discoverErr error
}

func (n *npu) chipID() int { return n.Chip.Chip }

// Backend implements plugin.Backend for Ascend NPUs.
type Backend struct {
	cfg  Config
	topo *pci.Reader

	// ledger records the vNPUs the plugin made.
	ledger *plugin.LedgerFile[vnpu, plugin.NoLedgerExtra]

	// leftOut holds the chips (card, chip) that could not be read at
	// start-up, unusable why: they are not published, and their vNPUs
	// are not touched until a start-up reads them.
	leftOut  map[[2]int]bool
	unusable []error

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

// New reads the node's chips and their templates. A chip that cannot be
// read (npu-smi fails on it, or timed out on a chip before it, or its PCI
// topology) is left out and logged, and the others are served; New fails
// when npu-smi cannot list the chips, or can read none of those it lists.
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
	b := &Backend{cfg: cfg, topo: pci.NewReader(cfg.SysfsRoot), ledger: newLedger(cfg.StateDir), byPhy: map[int]*npu{}, leftOut: map[[2]int]bool{}}
	var err error
	if b.major, err = readMajors(cfg.ProcRoot); err != nil {
		return nil, err
	}
	// Reading the chips and then their templates are a pass each
	// (vendortool.NewPass): a wedged npu-smi costs each one deadline, and
	// the chips it then did not query are left out. Two, not one, so that
	// a chip that wedges npu-smi alone leaves out the chips listed after
	// it but not the templates of those read before it.
	chips, unreadable, err := cfg.Tool.Chips(vendortool.NewPass(ctx))
	if err != nil {
		return nil, fmt.Errorf("npu-smi cannot list the NPUs: %w", err)
	}
	for _, u := range unreadable {
		b.leaveOut(u.Card, u.Chip, u)
	}
	templatesPass := vendortool.NewPass(ctx)
	for _, c := range chips {
		n := &npu{Chip: c, family: family(c.Name), topology: pci.Topology{NUMANode: -1}}
		if c.BusID != "" {
			if n.topology, err = b.topo.Lookup(c.BusID); err != nil {
				b.leaveOut(c.Card, c.Chip, fmt.Errorf("NPU %d: PCI topology: %w", c.PhyID, err))
				continue
			}
		}
		if n.templates, err = cfg.Tool.Templates(templatesPass, c.Card, c.Chip); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			b.leaveOut(c.Card, c.Chip, fmt.Errorf("NPU %d: vNPU templates: %w", c.PhyID, err))
			continue
		}
		b.npus = append(b.npus, n)
		b.byPhy[c.PhyID] = n
	}
	if len(b.npus) == 0 && len(b.unusable) > 0 {
		return nil, fmt.Errorf("npu-smi can read none of the NPUs: %w", errors.Join(b.unusable...))
	}
	for _, err := range b.unusable {
		klog.FromContext(ctx).Error(err, "NPU left out: it cannot be read; the other NPUs are served")
	}
	assignHCCSGroups(b.npus)
	if cfg.HealthInterval > 0 {
		// The first publish already taints what is unhealthy.
		b.probeHealth(ctx)
	}
	return b, nil
}

// leaveOut records a chip that New could not read.
func (b *Backend) leaveOut(card, chip int, err error) {
	b.leftOut[[2]int{card, chip}] = true
	b.unusable = append(b.unusable, err)
}

// Unusable returns why each chip that could not be read at start-up was
// left out (New has logged them).
func (b *Backend) Unusable() []error { return b.unusable }
