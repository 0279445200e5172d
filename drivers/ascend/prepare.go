package ascend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// vNPU ids of a chip: npu-smi takes ids from phyID*16+100 to
// phyID*16+115.
const (
	vnpuIDBase    = 100
	vnpuIDsPerNPU = 16
)

// ledgerFile records every vNPU the plugin made, by claim and device,
// before npu-smi makes it: a vNPU is the plugin's only if it is here, and
// one made by a prepare that never completed is found here and destroyed.
const ledgerFile = "vnpus.json"

// vnpu is a ledger entry and a prepared device's state.
type vnpu struct {
	Claim  types.UID `json:"claim"`
	Device string    `json:"device"`
	// Template is what the vNPU was made from. Entries of releases
	// before it was recorded lack it: their device name says it (see
	// template).
	Template string `json:"template,omitempty"`
	Card     int    `json:"card"`
	Chip     int    `json:"chip"`
	ID       int    `json:"id"`
}

// ClaimUID implements plugin.LedgerInstance.
func (v vnpu) ClaimUID() types.UID { return v.Claim }

// is says whether a vNPU that npu-smi lists on the entry's chip is the
// one the entry records: its id and its template. An id alone is not
// enough: npu-smi takes any free id, so a vNPU of the plugin that an
// operator destroyed can be followed by one of theirs under its id. One
// of the same template under the same id cannot be told apart (npu-smi
// reports nothing else a vNPU was made with); dropping vanished entries
// whenever the chip is listed for a create (see pruneLocked) narrows that
// to what happens between two of the plugin's operations on the chip.
func (v vnpu) is(listed npusmi.VNPU) bool {
	if v.ID != listed.ID {
		return false
	}
	if v.Template != "" {
		return v.Template == listed.Template
	}
	// An entry of an earlier release: the device name,
	// npu-<phy>-<template>-<k>, carries the template as vnpuName writes it.
	return strings.HasSuffix(strings.TrimRight(v.Device, "0123456789"), "-"+slotTemplate(listed.Template)+"-")
}

// newLedger is the vNPU ledger in dir. It has been a bare list of vNPUs
// from the start, and stays one so that an older release reads it.
func newLedger(dir string) *plugin.LedgerFile[vnpu, plugin.NoLedgerExtra] {
	return plugin.NewListLedgerFile[vnpu](filepath.Join(dir, ledgerFile))
}

// chipResourcesLocked returns what the chip's vNPUs may use in all (the
// free figures plus what existing vNPUs hold, by counter; a column npu-smi
// does not report is left out) and the templates of the vNPUs that are
// not in the ledger: an operator's, which hold their share of the chip.
func (b *Backend) chipResourcesLocked(ctx context.Context, n *npu, ledger []vnpu) (map[string]int64, []npusmi.Template, error) {
	info, err := b.cfg.Tool.VNPUInfo(ctx, n.Card, n.chipID())
	if err != nil {
		return nil, nil, fmt.Errorf("NPU %d: vNPU resources: %w", n.PhyID, err)
	}
	var existing, foreign []npusmi.Template
	for _, v := range info.VNPUs {
		for _, t := range n.templates {
			if t.Name != v.Template {
				continue
			}
			existing = append(existing, t)
			if !holds(ledger, n, v) {
				foreign = append(foreign, t)
			}
		}
	}
	usable := map[string]int64{}
	for _, c := range counterSpecs {
		r, ok := info.Resources[c.column]
		if !ok || r.NA {
			continue
		}
		v := int64(r.Free) * c.unit
		for _, t := range existing {
			v += c.use(t)
		}
		usable[c.name] = v
	}
	if _, ok := usable[counterCores]; !ok {
		usable[counterCores] = int64(n.AICores)
	}
	return usable, foreign, nil
}

// holds says whether the ledger records a vNPU the chip lists for a
// claim. One of an entry without a claim (a hand-edited ledger: the
// plugin writes none) is not the plugin's to hand out.
func holds(ledger []vnpu, n *npu, v npusmi.VNPU) bool {
	return slices.ContainsFunc(ledger, func(e vnpu) bool {
		return e.Claim != "" && e.Card == n.Card && e.Chip == n.chipID() && e.is(v)
	})
}

// pruneLocked drops the ledger's entries of a chip that the chip's
// listing does not show (gone by id, or its id now another template's):
// the vNPU went outside the plugin (an operator, a driver reload), and
// the entry must not claim, nor its claim's unprepare destroy, a vNPU
// that takes the id later.
func pruneLocked(l *plugin.Ledger[vnpu, plugin.NoLedgerExtra], n *npu, listed []npusmi.VNPU) {
	l.Instances = slices.DeleteFunc(l.Instances, func(e vnpu) bool {
		return e.Card == n.Card && e.Chip == n.chipID() && !slices.ContainsFunc(listed, e.is)
	})
}

// Validate checks the devices belong to this node.
func (b *Backend) Validate(_ context.Context, req *plugin.PrepareRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, a := range req.Devices {
		if _, ok := b.devs[a.Device]; !ok {
			errs = append(errs, fmt.Errorf("device %s is not an NPU of this node", a.Device))
		}
	}
	return errors.Join(errs...)
}

// Prepare creates the claim's vNPUs and returns the CDI edits: device
// nodes, and ASCEND_VISIBLE_DEVICES with the claim's chips or vNPUs (and
// ASCEND_RUNTIME_OPTIONS=VIRTUAL for vNPUs). On error, vNPUs it made are
// destroyed.
func (b *Backend) Prepare(ctx context.Context, req *plugin.PrepareRequest) (*plugin.PrepareResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	claim := plugin.ClaimRefOf(req.Claim)
	if claim.UID == "" {
		// The ledger owns a vNPU by its claim's UID: an entry without
		// one would belong to no claim. The kubelet hands no such claim
		// (the API server gives every object a UID), but a caller of the
		// backend could.
		return nil, fmt.Errorf("claim %s has no UID: nothing is prepared for it", claim)
	}
	// The node-wide nodes first: a driver region missing from
	// /proc/devices refuses the claim before any vNPU is made.
	common, err := b.commonNodes()
	if err != nil {
		return nil, err
	}
	resp := &plugin.PrepareResponse{}
	resp.Common.DeviceNodes = common
	var visible []string
	virtual := false
	for _, a := range req.Devices {
		d, ok := b.devs[a.Device]
		if !ok {
			err := fmt.Errorf("device %s is not an NPU of this node", a.Device)
			return nil, errors.Join(err, b.unprepareLocked(ctx, claim, resp.Devices))
		}
		out := a.Prepared()
		switch d.kind {
		case kindNPU:
			n, err := b.node(fmt.Sprintf("davinci%d", d.npu.PhyID), procDavinci, b.major.davinci, int64(d.npu.PhyID))
			if err != nil {
				return nil, errors.Join(fmt.Errorf("device %s: %w", a.Device, err), b.unprepareLocked(ctx, claim, resp.Devices))
			}
			out.Edits.DeviceNodes = []*cdispec.DeviceNode{n}
			visible = append(visible, strconv.Itoa(d.npu.PhyID))
		case kindVNPU:
			if b.major.davinci <= 0 {
				// Refused before npu-smi makes a vNPU no node could reach.
				err := fmt.Errorf("device %s: %w", a.Device, missingMajor("vdavinci", procDavinci))
				return nil, errors.Join(err, b.unprepareLocked(ctx, claim, resp.Devices))
			}
			v, err := b.createLocked(ctx, claim, d)
			if err != nil {
				return nil, errors.Join(err, b.unprepareLocked(ctx, claim, resp.Devices))
			}
			out.State, _ = json.Marshal(v)
			n, _ := b.node(fmt.Sprintf("vdavinci%d", v.ID), procDavinci, b.major.davinci, int64(v.ID))
			out.Edits.DeviceNodes = []*cdispec.DeviceNode{n}
			visible = append(visible, strconv.Itoa(v.ID))
			virtual = true
		}
		resp.Devices = append(resp.Devices, out)
	}
	resp.Common.Mounts = b.driverMounts(req.Devices)
	sort.Slice(visible, func(i, j int) bool { return atoi(visible[i]) < atoi(visible[j]) })
	resp.Common.Env = []string{"ASCEND_VISIBLE_DEVICES=" + strings.Join(visible, ",")}
	if virtual {
		resp.Common.Env = append(resp.Common.Env, "ASCEND_RUNTIME_OPTIONS=VIRTUAL")
	}
	return resp, nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// createLocked makes a vNPU for a device of a claim: the lowest free id
// of the chip's range, recorded in the ledger before npu-smi makes it.
// On error the entry may stay in the ledger: the caller releases the
// claim.
func (b *Backend) createLocked(ctx context.Context, claim plugin.ClaimRef, d *device) (vnpu, error) {
	n := d.npu
	info, err := b.cfg.Tool.VNPUInfo(ctx, n.Card, n.chipID())
	if err != nil {
		return vnpu{}, fmt.Errorf("NPU %d: list vNPUs: %w", n.PhyID, err)
	}
	existing := info.VNPUs
	l, err := b.ledger.Load()
	if err != nil {
		return vnpu{}, err
	}
	pruneLocked(l, n, existing)
	used := map[int]bool{}
	for _, v := range existing {
		used[v.ID] = true
	}
	for _, e := range l.Instances {
		if e.Card == n.Card && e.Chip == n.chipID() {
			used[e.ID] = true
		}
	}
	id := -1
	for k := 0; k < vnpuIDsPerNPU; k++ {
		if c := vnpuIDBase + n.PhyID*vnpuIDsPerNPU + k; !used[c] {
			id = c
			break
		}
	}
	if id < 0 {
		return vnpu{}, fmt.Errorf("NPU %d: no free vNPU id", n.PhyID)
	}
	v := vnpu{Claim: claim.UID, Device: d.name, Template: d.template.Name, Card: n.Card, Chip: n.chipID(), ID: id}
	l.Instances = append(l.Instances, v)
	if err := b.ledger.Save(l); err != nil {
		return vnpu{}, fmt.Errorf("record vNPU: %w", err)
	}
	if _, err := b.cfg.Tool.CreateVNPU(ctx, n.Card, n.chipID(), d.template.Name, id); err != nil {
		// The entry stays: npu-smi may have made the vNPU before it
		// failed (killed at its deadline, or failing to list it
		// afterwards). The prepare's rollback, or a later unprepare or
		// reconcile where that fails, destroys it if the chip lists it
		// (see destroy), and drops the entry.
		return vnpu{}, fmt.Errorf("NPU %d: create vNPU %s: %w", n.PhyID, d.template.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Created vNPU", "npu", n.PhyID, "template", d.template.Name, "id", id)
	return v, nil
}

// Unprepare destroys the claim's vNPUs: those in the devices' state, and
// any the ledger holds for the claim (a prepare interrupted between
// making a vNPU and recording it in the checkpoint).
func (b *Backend) Unprepare(ctx context.Context, claim plugin.ClaimRef, devices []plugin.PreparedDevice) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unprepareLocked(ctx, claim, devices)
}

func (b *Backend) unprepareLocked(ctx context.Context, claim plugin.ClaimRef, _ []plugin.PreparedDevice) error {
	// One pass: a wedged npu-smi costs the claim's vNPUs one deadline, not
	// one each; those not destroyed stay in the ledger for the retry.
	ctx = vendortool.NewPass(ctx)
	return without(b.ledger.Release(claim.UID, b.destroyOwned(ctx, false), nil), errKept)
}

// destroyOwned is the destroy of unprepare (and, with reconcile, of
// Reconcile). It keeps, with errKept, the entries whose vNPUs are not
// the plugin's to destroy: those of no claim, which the plugin never
// writes (Prepare refuses a claim without a UID) and which only a
// hand-edited ledger holds, and which the ledger would otherwise take for
// the instances of a claim that is not prepared; and, at reconcile, those
// of a chip left out at start-up, whose vNPUs cannot be read: a start-up
// that reads the chip destroys them, and failing here would fail the
// start-up, and the other chips with it.
func (b *Backend) destroyOwned(ctx context.Context, reconcile bool) func(vnpu) error {
	logger := klog.FromContext(ctx)
	return func(e vnpu) error {
		switch {
		case e.Claim == "":
			logger.Error(nil, "vNPU ledger entry names no claim, leaving the vNPU alone", "card", e.Card, "chip", e.Chip, "id", e.ID, "device", e.Device)
			return errKept
		case reconcile && b.leftOut[[2]int{e.Card, e.Chip}]:
			logger.Info("Keeping a vNPU of an NPU left out at start-up for a later start-up to destroy", "card", e.Card, "chip", e.Chip, "id", e.ID, "claimUID", e.Claim)
			return errKept
		}
		return b.destroy(ctx, e)
	}
}

// destroy removes the vNPU of a ledger entry. One that is gone already
// is fine, and so is one whose id another template's vNPU now holds:
// that is someone else's (see vnpu.is).
func (b *Backend) destroy(ctx context.Context, e vnpu) error {
	info, err := b.cfg.Tool.VNPUInfo(ctx, e.Card, e.Chip)
	if err != nil {
		return fmt.Errorf("card %d chip %d: list vNPUs: %w", e.Card, e.Chip, err)
	}
	for _, v := range info.VNPUs {
		if e.is(v) {
			if err := b.cfg.Tool.DestroyVNPU(ctx, e.Card, e.Chip, e.ID); err != nil {
				return fmt.Errorf("card %d chip %d: destroy vNPU %d: %w", e.Card, e.Chip, e.ID, err)
			}
			klog.FromContext(ctx).V(2).Info("Destroyed vNPU", "card", e.Card, "chip", e.Chip, "id", e.ID)
			return nil
		}
	}
	return nil
}

// errKept is what destroyOwned returns for a ledger entry it leaves
// alone on purpose: the ledger keeps an entry whose destroy fails, and
// the error is then dropped, as it is no failure of the operation.
var errKept = errors.New("ledger entry kept")

// Reconcile implements plugin.Reconciler: vNPUs of the ledger whose
// claim is not prepared are destroyed (left by a crash mid-prepare, or
// by a claim unprepared while the plugin was down), but for those
// destroyOwned keeps.
func (b *Backend) Reconcile(ctx context.Context, prepared []plugin.ClaimState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx = vendortool.NewPass(ctx)
	return without(b.ledger.Reconcile(prepared, b.destroyOwned(ctx, true), nil), errKept)
}

// without is err less the errors of it that are target: err as the
// ledger joins the errors of an operation's entries.
func without(err, target error) error {
	if err == nil || !errors.Is(err, target) {
		return err
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil // target itself, or target wrapped alone
	}
	var rest []error
	for _, e := range joined.Unwrap() {
		rest = append(rest, without(e, target))
	}
	return errors.Join(rest...)
}

// configHandler decodes NpuConfigs for the plugin core.
type configHandler struct{}

// ConfigHandler implements plugin.Configurable.
func (b *Backend) ConfigHandler() plugin.ConfigHandler { return configHandler{} }

// Decode implements plugin.ConfigHandler.
func (configHandler) Decode(raw []byte) (any, error) { return configv1alpha1.DecodeNpuConfig(raw) }

// Effective implements plugin.ConfigHandler: the last config that sets
// the driver mode wins; the default mounts the driver.
func (configHandler) Effective(configs []any) (any, error) {
	out := &configv1alpha1.NpuConfig{Driver: configv1alpha1.NpuDriverMount}
	for _, c := range configs {
		if d := c.(*configv1alpha1.NpuConfig).Driver; d != "" {
			out.Driver = d
		}
	}
	return out, nil
}

// driverMounts are the host driver's user space, which Ascend's container
// runtime mounts into every NPU container: mounted unless every device of
// the claim is configured with driver: None.
func (b *Backend) driverMounts(devices []plugin.AllocatedDevice) []*cdispec.Mount {
	mount := false
	for _, a := range devices {
		cfg, _ := a.Config.(*configv1alpha1.NpuConfig)
		if cfg == nil || cfg.Driver != configv1alpha1.NpuDriverNone {
			mount = true
		}
	}
	if !mount || b.cfg.DriverRoot == "" {
		return nil
	}
	var paths []string
	for _, p := range []string{"lib64", "version.info", "include"} {
		paths = append(paths, filepath.Join(b.cfg.DriverRoot, p))
	}
	if b.cfg.DCMIDir != "" {
		paths = append(paths, b.cfg.DCMIDir)
	}
	if b.cfg.NPUSMI != "" {
		paths = append(paths, b.cfg.NPUSMI)
	}
	out := make([]*cdispec.Mount, 0, len(paths))
	for _, p := range paths {
		out = append(out, &cdispec.Mount{HostPath: p, ContainerPath: p, Options: []string{"ro", "nosuid", "nodev", "bind"}})
	}
	return out
}

// commonNodes are the driver's node-wide nodes every NPU container gets.
func (b *Backend) commonNodes() ([]*cdispec.DeviceNode, error) {
	var out []*cdispec.DeviceNode
	for _, c := range []struct {
		name, region string
		major        int64
	}{{"davinci_manager", procManager, b.major.manager}, {"devmm_svm", procSVM, b.major.svm}, {"hisi_hdc", procHDC, b.major.hdc}} {
		n, err := b.node(c.name, c.region, c.major, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// node is a character device node of the driver's region (its
// /proc/devices name). A major that was not read is refused: a 0:N node
// opens nothing the container wants.
func (b *Backend) node(name, region string, major, minor int64) (*cdispec.DeviceNode, error) {
	if major <= 0 {
		return nil, missingMajor(name, region)
	}
	return plugin.CharDeviceNode(b.cfg.DevRoot, "/dev/"+name, major, minor), nil
}

func missingMajor(node, region string) error {
	return fmt.Errorf("no major for /dev/%s: /proc/devices lists no %s region (is the Ascend driver loaded?)", node, region)
}
