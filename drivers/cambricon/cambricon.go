// Package cambricon is the Cambricon MLU backend of Strata's kubelet
// plugin (driver cambricon.strata.sh). Every MLU card (one chip, as cnmon
// counts cards) is published once, as a device that allows several
// allocations and has two consumable capacities: vcore, the percent of the
// card's MLU time, and vmemory, its memory in bytes. A claim that asks for
// neither gets all of both, the whole card, which nothing can then share;
// a claim that asks for less gets a dynamic sMLU of that size, which the
// plugin creates with cnmon when the claim is prepared and destroys when
// it is unprepared. Whole and shared use of one card therefore exclude
// each other in the allocator, and sMLUs never overcommit a card.
//
// Every instance the plugin makes is written to a ledger in its state
// directory before cnmon makes it; at start-up the plugin destroys the
// instances the ledger holds for claims that are no longer prepared and
// leaves every other instance alone, publishing the share such foreign
// instances hold as taken.
package cambricon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// DriverName is the DRA driver name of this backend.
const DriverName = "cambricon.strata.sh"

// DefaultMemoryUnit is the granularity of sMLU memory: what Cambricon's
// device plugin counts vmemory in (its --min-dsmlu-unit of 256 MiB), so
// the seeds' "cambricon.com/mlu.smlu.vmemory: 4" is a claim for 1 GiB.
const DefaultMemoryUnit = 256 << 20

// Tool is what the backend needs of cnmon; *cnmon.Client is the real one.
type Tool interface {
	// Cards lists the cards cnmon can describe and why it cannot
	// describe the others its table lists; err is the table failing.
	Cards(ctx context.Context) (cards []cnmon.Card, unreadable []*cnmon.CardError, err error)
	SMLUInfo(ctx context.Context, card int) (cnmon.SMLUInfo, error)
	SetSMLUMode(ctx context.Context, card int, on bool) error
	CreateSMLU(ctx context.Context, card, vcorePercent int, memoryMB int64) (cnmon.SMLU, error)
	DestroySMLU(ctx context.Context, card, id int) error
	// Health is the card's Health State (cnmon info -c N).
	Health(ctx context.Context, card int) (cnmon.Health, error)
}

var _ Tool = (*cnmon.Client)(nil)

// Config wires the backend to the host.
type Config struct {
	Tool Tool
	// SysfsRoot is where sysfs is mounted ("" means /sys): PCI topology.
	SysfsRoot string
	// ProcRoot is where procfs is mounted ("" means /proc): device majors.
	ProcRoot string
	// DevRoot is prefixed to device node paths on the host ("" means /).
	DevRoot string
	// DevCharDir is where the kernel lists character devices by number
	// ("" means <SysfsRoot>/dev/char): the numbers of an sMLU's
	// capability node, which the driver makes with the instance, are
	// read there.
	DevCharDir string
	// StateDir holds the ledger of sMLU instances the plugin made.
	StateDir string
	// MemoryUnit is the step of sMLU memory in bytes (0 means
	// DefaultMemoryUnit); it must be a whole number of MiB.
	MemoryUnit int64
	// CNMON is the host path of cnmon, mounted into containers unless a
	// claim's MluConfig says cnmon: None. Empty leaves it out.
	CNMON string
	// HealthInterval is how often every card's health is read (see
	// WatchHealth); 0 reads none and taints nothing.
	HealthInterval time.Duration
}

// card is a discovered card with what the backend derived from it.
type card struct {
	cnmon.Card
	topology pci.Topology
	// groups maps a group size to the id of the card's MLU-Link group of
	// that size.
	groups map[int]string
	// memoryBytes is the card's memory rounded down to the memory unit:
	// what a whole-card claim consumes.
	memoryBytes int64
	// smlu is the card's sMLU mode and instances as last read.
	smlu cnmon.SMLUInfo
	// discoverErr is why the last Discover could not read the card's
	// sMLU instances (cnmon failed on it, or timed out on a card before
	// it in that publish); the card is then published tainted, from what
	// was last read of it.
	discoverErr error
}

// Backend implements plugin.Backend for Cambricon MLUs.
type Backend struct {
	cfg  Config
	topo *pci.Reader

	// ledger records the sMLU instances the plugin made.
	ledger *ledgerFile

	// leftOut holds the cards that could not be read at start-up,
	// unusable why: they are not published, and their instances and
	// sMLU mode are not touched until a start-up reads them.
	leftOut  map[int]bool
	unusable []error

	mu     sync.Mutex
	cards  []*card
	byName map[string]*card
	major  majors

	health accelerator.Health
}

var (
	_ plugin.Backend      = (*Backend)(nil)
	_ plugin.Validator    = (*Backend)(nil)
	_ plugin.Reconciler   = (*Backend)(nil)
	_ plugin.Configurable = (*Backend)(nil)
)

// New reads the node's cards. A card that cannot be read (cnmon fails on
// it, or timed out on a card before it, or its PCI topology) is left out
// and logged, and the others are served; New fails when cnmon cannot list the cards, or can read none
// of those it lists.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Tool == nil {
		return nil, errors.New("cnmon is required")
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
	if cfg.DevCharDir == "" {
		cfg.DevCharDir = filepath.Join(cfg.SysfsRoot, "dev", "char")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("a state directory is required")
	}
	if cfg.MemoryUnit == 0 {
		cfg.MemoryUnit = DefaultMemoryUnit
	}
	if cfg.MemoryUnit < 1<<20 || cfg.MemoryUnit%(1<<20) != 0 {
		return nil, fmt.Errorf("sMLU memory unit %d bytes is not a positive whole number of MiB", cfg.MemoryUnit)
	}
	b := &Backend{cfg: cfg, topo: pci.NewReader(cfg.SysfsRoot), ledger: newLedger(cfg.StateDir), byName: map[string]*card{}, leftOut: map[int]bool{}}
	var err error
	if b.major, err = readMajors(cfg.ProcRoot); err != nil {
		return nil, err
	}
	// Reading the cards is a pass (vendortool.NewPass): a wedged cnmon
	// costs it one deadline, and the cards it then did not query are left
	// out.
	cards, unreadable, err := cfg.Tool.Cards(vendortool.NewPass(ctx))
	if err != nil {
		return nil, fmt.Errorf("cnmon cannot list the MLUs: %w", err)
	}
	for _, u := range unreadable {
		b.leaveOut(u.Card, u)
	}
	for _, c := range cards {
		k := &card{Card: c, memoryBytes: (c.MemoryMB << 20) / cfg.MemoryUnit * cfg.MemoryUnit}
		if k.memoryBytes == 0 {
			// The configuration's fault, not the card's.
			return nil, fmt.Errorf("MLU %d: %d MiB of memory is less than one sMLU memory unit", c.Index, c.MemoryMB)
		}
		if k.topology, err = b.topo.Lookup(c.BusID); err != nil {
			b.leaveOut(c.Index, fmt.Errorf("MLU %d: PCI topology: %w", c.Index, err))
			continue
		}
		b.cards = append(b.cards, k)
		b.byName[deviceName(k)] = k
	}
	if len(b.cards) == 0 && len(b.unusable) > 0 {
		return nil, fmt.Errorf("cnmon can read none of the MLUs: %w", errors.Join(b.unusable...))
	}
	for _, err := range b.unusable {
		klog.FromContext(ctx).Error(err, "MLU left out: it cannot be read; the other MLUs are served")
	}
	assignMLULinkGroups(b.cards)
	if cfg.HealthInterval > 0 {
		// The first publish already taints what is unhealthy.
		b.probeHealth(ctx)
	}
	return b, nil
}

func deviceName(c *card) string { return fmt.Sprintf("mlu-%d", c.Index) }

// leaveOut records a card that New could not read.
func (b *Backend) leaveOut(index int, err error) {
	b.leftOut[index] = true
	b.unusable = append(b.unusable, err)
}

// Unusable returns why each card that could not be read at start-up was
// left out (New has logged them).
func (b *Backend) Unusable() []error { return b.unusable }
