package cambricon

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

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// Environment the container runtime and Cambricon's libraries read.
const (
	// EnvVisibleDevices lists the claim's card indexes.
	EnvVisibleDevices = "CAMBRICON_VISIBLE_DEVICES"
	// EnvSMLUProfile names the profile of each of the claim's sMLUs, in
	// card order, as the driver names profiles ("10p.1024mb").
	EnvSMLUProfile = "CAMBRICON_DSMLU_PROFILE"
)

// ledgerName is the file, in the state directory, that records every
// sMLU instance the plugin made, by claim, and the cards whose sMLU mode
// it switched on: an instance is the plugin's only if it is here.
const ledgerName = "smlus.json"

// ledgerFile holds the ledger as a JSON object: the instances, and the
// cards whose sMLU mode the plugin switched on.
type ledgerFile = plugin.LedgerFile[instance, smluModes]

// ledger is what the ledger file holds.
type ledger = plugin.Ledger[instance, smluModes]

// smluModes is what the ledger records beside the instances.
type smluModes struct {
	// SMLUOn lists the cards whose sMLU mode the plugin switched on; it
	// switches each off again once the card holds no instance.
	SMLUOn []int `json:"smluOn,omitempty"`
}

// instance is one sMLU the plugin made for a claim.
type instance struct {
	Claim    types.UID  `json:"claim"`
	Device   string     `json:"device"`
	ShareID  *types.UID `json:"shareID,omitempty"`
	Card     int        `json:"card"`
	ID       int        `json:"id"`
	VCore    int        `json:"vcore"`
	MemoryMB int64      `json:"memoryMB"`
}

// ClaimUID implements plugin.LedgerInstance.
func (in instance) ClaimUID() types.UID { return in.Claim }

// newLedger is the sMLU ledger in dir.
func newLedger(dir string) *ledgerFile {
	return plugin.NewLedgerFile[instance, smluModes](filepath.Join(dir, ledgerName))
}

// is says whether an sMLU that cnmon lists on the entry's card is the
// one the entry records: its id and its size. An id alone is not enough:
// the driver hands out the lowest free id, so an sMLU of the plugin that
// went outside it (an operator destroyed it, a driver reload) can be
// followed by an operator's under its id. One of the same size under the
// same id cannot be told apart (cnmon lists nothing else an sMLU was made
// with); dropping vanished entries whenever the card is listed for a
// create (createLocked) narrows that to what happens between two of the
// plugin's operations on the card.
func (e instance) is(listed cnmon.SMLU) bool {
	return e.ID == listed.ID && e.VCore == listed.VCorePercent && e.MemoryMB == listed.MemoryMB
}

// holds says whether the ledger records an sMLU a card lists for a claim.
// One of an entry without a claim (a hand-edited ledger: the plugin
// writes none) is not the plugin's to hand out.
func holds(l *ledger, card int, listed cnmon.SMLU) bool {
	return slices.ContainsFunc(l.Instances, func(e instance) bool { return e.Claim != "" && e.Card == card && e.is(listed) })
}

// share is what a claim consumes of a card, from its allocation.
type share struct {
	vcore  int64
	memory int64
}

// shareOf reads the consumed capacity of an allocated device. A device
// allocated without consumed capacity (by a scheduler that does not
// know consumable capacity) is the whole card.
func (b *Backend) shareOf(c *card, a plugin.AllocatedDevice) (share, error) {
	s := share{vcore: fullVCore, memory: c.memoryBytes}
	for name, dst := range map[resourceapi.QualifiedName]*int64{CapacityVCore: &s.vcore, CapacityVMemory: &s.memory} {
		v, ok := a.ConsumedCapacity[name]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return share{}, fmt.Errorf("device %s: consumed %s %q: %w", a.Device, name, v, err)
		}
		*dst = q.Value()
	}
	if s.vcore < 1 || s.vcore > fullVCore {
		return share{}, fmt.Errorf("device %s: consumed vcore %d is not within 1 to %d", a.Device, s.vcore, fullVCore)
	}
	if s.memory < 1<<20 || s.memory%(1<<20) != 0 || s.memory > c.memoryBytes {
		return share{}, fmt.Errorf("device %s: consumed vmemory %d is not a whole number of MiB up to the card's %d", a.Device, s.memory, c.memoryBytes)
	}
	return s, nil
}

func (s share) whole(c *card) bool { return s.vcore >= fullVCore && s.memory >= c.memoryBytes }

// Validate checks the devices belong to this node and what they consume.
func (b *Backend) Validate(_ context.Context, req *plugin.PrepareRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, a := range req.Devices {
		c, ok := b.byName[a.Device]
		if !ok {
			errs = append(errs, fmt.Errorf("device %s is not an MLU of this node", a.Device))
			continue
		}
		s, err := b.shareOf(c, a)
		if err != nil {
			errs = append(errs, err)
		} else if !s.whole(c) && b.major.smluCap == 0 {
			errs = append(errs, fmt.Errorf("device %s: a share needs an sMLU, and the driver has none (no %s in /proc/devices; sMLU needs driver 5.10.27 or later)", a.Device, procCap))
		}
	}
	return errors.Join(errs...)
}

// Prepare creates the claim's sMLUs and returns the CDI edits: the
// control node, each card's device and IPC nodes (and an sMLU's
// capability node), CAMBRICON_VISIBLE_DEVICES with the claim's cards and
// the sMLU profiles. On error, the instances it made are destroyed.
func (b *Backend) Prepare(ctx context.Context, req *plugin.PrepareRequest) (*plugin.PrepareResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	claim := plugin.ClaimRefOf(req.Claim)
	if claim.UID == "" {
		// The ledger owns an instance by its claim's UID: an entry
		// without one would belong to no claim. The kubelet hands no such
		// claim (the API server gives every object a UID), but a caller
		// of the backend could.
		return nil, fmt.Errorf("claim %s has no UID: nothing is prepared for it", claim)
	}
	fail := func(err error) (*plugin.PrepareResponse, error) {
		return nil, errors.Join(err, b.unprepareLocked(ctx, claim))
	}
	resp := &plugin.PrepareResponse{}
	type visible struct {
		card    int
		profile string
	}
	var vis []visible
	for _, a := range req.Devices {
		c, ok := b.byName[a.Device]
		if !ok {
			return fail(fmt.Errorf("device %s is not an MLU of this node", a.Device))
		}
		s, err := b.shareOf(c, a)
		if err != nil {
			return fail(err)
		}
		out := a.Prepared()
		out.Edits.DeviceNodes = b.cardNodes(c)
		v := visible{card: c.Index}
		if !s.whole(c) {
			in, err := b.createLocked(ctx, claim, a, c, s)
			if err != nil {
				return fail(err)
			}
			out.State, _ = json.Marshal(in)
			capNode, err := b.capabilityNode(c.Index, in.ID)
			if err != nil {
				return fail(fmt.Errorf("MLU %d: sMLU %d: %w", c.Index, in.ID, err))
			}
			out.Edits.DeviceNodes = append(out.Edits.DeviceNodes, capNode)
			v.profile = cnmon.SMLUProfileName(in.VCore, in.MemoryMB)
		}
		vis = append(vis, v)
		resp.Devices = append(resp.Devices, out)
	}
	sort.SliceStable(vis, func(i, j int) bool { return vis[i].card < vis[j].card })
	var cards, profiles []string
	for _, v := range vis {
		if s := strconv.Itoa(v.card); !slices.Contains(cards, s) {
			cards = append(cards, s)
		}
		if v.profile != "" {
			profiles = append(profiles, v.profile)
		}
	}
	resp.Common.DeviceNodes = []*cdispec.DeviceNode{plugin.CharDeviceNode(b.cfg.DevRoot, cnmon.ControlDevicePath, b.major.ctl, 0)}
	resp.Common.Env = []string{EnvVisibleDevices + "=" + strings.Join(cards, ",")}
	if len(profiles) > 0 {
		resp.Common.Env = append(resp.Common.Env, EnvSMLUProfile+"="+strings.Join(profiles, ","))
	}
	resp.Common.Mounts = b.toolMounts(req.Devices)
	return resp, nil
}

// cardNodes are a card's device and IPC nodes, whose minor is the card
// index.
func (b *Backend) cardNodes(c *card) []*cdispec.DeviceNode {
	out := []*cdispec.DeviceNode{plugin.CharDeviceNode(b.cfg.DevRoot, cnmon.DevicePath(c.Index), b.major.dev, int64(c.Index))}
	if b.major.ipcm != 0 {
		out = append(out, plugin.CharDeviceNode(b.cfg.DevRoot, cnmon.IPCMDevicePath(c.Index), b.major.ipcm, int64(c.Index)))
	}
	return out
}

// createLocked makes an sMLU for a device of a claim. The instance is
// recorded before cnmon makes it, under the id the driver hands out (the
// lowest free from 1), so that a crash in between leaves it to be found;
// a card whose sMLU mode is off is switched on first, and recorded as
// such. A switch that the card does not read back fails before any
// instance is recorded or made.
func (b *Backend) createLocked(ctx context.Context, claim plugin.ClaimRef, a plugin.AllocatedDevice, c *card, s share) (instance, error) {
	info, err := b.cfg.Tool.SMLUInfo(ctx, c.Index)
	if err != nil {
		return instance{}, fmt.Errorf("MLU %d: list sMLU instances: %w", c.Index, err)
	}
	l, err := b.ledger.Load()
	if err != nil {
		return instance{}, err
	}
	// An instance of the ledger that the card no longer lists (gone, or
	// its id now another size's) went outside the plugin (an operator, a
	// driver reload): the driver hands its id out again, and its entry
	// must not then claim, and its claim's unprepare destroy, another
	// claim's instance.
	l.Instances = slices.DeleteFunc(l.Instances, func(e instance) bool {
		return e.Card == c.Index && !slices.ContainsFunc(info.Instances, e.is)
	})
	if !info.Enabled {
		if !slices.Contains(l.Extra.SMLUOn, c.Index) {
			l.Extra.SMLUOn = append(l.Extra.SMLUOn, c.Index)
			if err := b.ledger.Save(l); err != nil {
				return instance{}, fmt.Errorf("record sMLU mode: %w", err)
			}
		}
		if err := b.setSMLUModeLocked(ctx, c.Index, true); err != nil {
			return instance{}, err
		}
		klog.FromContext(ctx).V(2).Info("Switched sMLU mode on", "card", c.Index)
	}
	id := 1
	for slices.ContainsFunc(info.Instances, func(in cnmon.SMLU) bool { return in.ID == id }) ||
		slices.ContainsFunc(l.Instances, func(e instance) bool { return e.Card == c.Index && e.ID == id }) {
		id++
	}
	in := instance{Claim: claim.UID, Device: a.Device, ShareID: a.ShareID, Card: c.Index, ID: id, VCore: int(s.vcore), MemoryMB: s.memory >> 20}
	l.Instances = append(l.Instances, in)
	if err := b.ledger.Save(l); err != nil {
		return instance{}, fmt.Errorf("record sMLU instance: %w", err)
	}
	made, err := b.cfg.Tool.CreateSMLU(ctx, c.Index, in.VCore, in.MemoryMB)
	if err != nil {
		return instance{}, fmt.Errorf("MLU %d: create sMLU of %d%% and %d MiB: %w", c.Index, in.VCore, in.MemoryMB, err)
	}
	if made.ID != id {
		// Someone else made an instance in between: record the id the
		// driver gave.
		l.Instances[len(l.Instances)-1].ID = made.ID
		in.ID = made.ID
		if err := b.ledger.Save(l); err != nil {
			return instance{}, errors.Join(fmt.Errorf("record sMLU instance %d of MLU %d: %w", made.ID, c.Index, err),
				b.cfg.Tool.DestroySMLU(ctx, c.Index, made.ID))
		}
	}
	klog.FromContext(ctx).V(2).Info("Created sMLU", "card", c.Index, "id", in.ID, "vcore", in.VCore, "memoryMB", in.MemoryMB)
	return in, nil
}

// Unprepare destroys the claim's sMLUs, as the ledger holds them.
func (b *Backend) Unprepare(ctx context.Context, claim plugin.ClaimRef, _ []plugin.PreparedDevice) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unprepareLocked(ctx, claim)
}

// unprepareLocked destroys the claim's instances (one already gone is
// fine), then switches sMLU mode off on the cards the plugin switched on
// that hold no instance.
func (b *Backend) unprepareLocked(ctx context.Context, claim plugin.ClaimRef) error {
	// One pass: a wedged cnmon costs the claim's sMLUs one deadline, not
	// one each; those not destroyed stay in the ledger for the retry.
	ctx = vendortool.NewPass(ctx)
	err := b.ledger.Release(claim.UID, b.destroyOwned(ctx, false), func(l *ledger) error { return b.switchOffIdle(ctx, l) })
	return without(err, errKept)
}

// destroyOwned is the destroy of unprepare (and, with reconcile, of
// Reconcile). It keeps, with errKept, the entries whose instances are
// not the plugin's to destroy: those of no claim, which the plugin never
// writes (Prepare refuses a claim without a UID) and which only a
// hand-edited ledger holds, and which the ledger would otherwise take for
// the instances of a claim that is not prepared; and, at reconcile, those
// of a card left out at start-up, whose instances cannot be read: a
// start-up that reads the card destroys them, and failing here would
// fail the start-up, and the other cards with it.
func (b *Backend) destroyOwned(ctx context.Context, reconcile bool) func(instance) error {
	logger := klog.FromContext(ctx)
	return func(e instance) error {
		switch {
		case e.Claim == "":
			logger.Error(nil, "sMLU ledger entry names no claim, leaving the instance alone", "card", e.Card, "id", e.ID, "device", e.Device)
			return errKept
		case reconcile && b.leftOut[e.Card]:
			logger.Info("Keeping an sMLU of an MLU left out at start-up for a later start-up to destroy", "card", e.Card, "id", e.ID, "claimUID", e.Claim)
			return errKept
		}
		return b.destroy(ctx, e)
	}
}

func (b *Backend) destroy(ctx context.Context, e instance) error {
	info, err := b.cfg.Tool.SMLUInfo(ctx, e.Card)
	if err != nil {
		return fmt.Errorf("MLU %d: list sMLU instances: %w", e.Card, err)
	}
	// Gone already, or the id now belongs to an instance of another size
	// (ours vanished and someone else got the id): not ours to destroy.
	if !slices.ContainsFunc(info.Instances, e.is) {
		return nil
	}
	if err := b.cfg.Tool.DestroySMLU(ctx, e.Card, e.ID); err != nil {
		return fmt.Errorf("MLU %d: destroy sMLU %d: %w", e.Card, e.ID, err)
	}
	klog.FromContext(ctx).V(2).Info("Destroyed sMLU", "card", e.Card, "id", e.ID)
	return nil
}

// switchOffIdle switches sMLU mode off on every card of SMLUOn that
// holds no instance, so that a whole-card claim finds the card as the
// driver starts it; a card that does not read back off stays in SMLUOn. A card holding an instance the plugin did not make
// keeps its mode, and so does a card left out at start-up: it cannot be
// read, and failing on it would fail every claim's unprepare.
func (b *Backend) switchOffIdle(ctx context.Context, l *ledger) error {
	var keep []int
	var errs []error
	for _, idx := range l.Extra.SMLUOn {
		if b.leftOut[idx] || slices.ContainsFunc(l.Instances, func(e instance) bool { return e.Card == idx }) {
			keep = append(keep, idx)
			continue
		}
		info, err := b.cfg.Tool.SMLUInfo(ctx, idx)
		if err != nil {
			errs = append(errs, fmt.Errorf("MLU %d: list sMLU instances: %w", idx, err))
			keep = append(keep, idx)
			continue
		}
		if len(info.Instances) > 0 {
			keep = append(keep, idx)
			continue
		}
		if info.Enabled {
			if err := b.setSMLUModeLocked(ctx, idx, false); err != nil {
				errs = append(errs, err)
				keep = append(keep, idx)
				continue
			}
			klog.FromContext(ctx).V(2).Info("Switched sMLU mode off", "card", idx)
		}
	}
	l.Extra.SMLUOn = keep
	return errors.Join(errs...)
}

// errKept is what destroyOwned returns for a ledger entry it leaves
// alone on purpose: the ledger keeps an entry whose destroy fails, and
// the error is then dropped, as it is no failure of the operation.
var errKept = errors.New("ledger entry kept")

// Reconcile implements plugin.Reconciler: instances of the ledger whose
// claim is not prepared are destroyed (left by a crash mid-prepare, or by
// a claim unprepared while the plugin was down), but for those
// destroyOwned keeps, and idle cards switched back.
func (b *Backend) Reconcile(ctx context.Context, prepared []plugin.ClaimState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx = vendortool.NewPass(ctx)
	err := b.ledger.Reconcile(prepared, b.destroyOwned(ctx, true), func(l *ledger) error { return b.switchOffIdle(ctx, l) })
	return without(err, errKept)
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

// configHandler decodes MluConfigs for the plugin core.
type configHandler struct{}

// ConfigHandler implements plugin.Configurable.
func (b *Backend) ConfigHandler() plugin.ConfigHandler { return configHandler{} }

// Decode implements plugin.ConfigHandler.
func (configHandler) Decode(raw []byte) (any, error) { return configv1alpha1.DecodeMluConfig(raw) }

// Effective implements plugin.ConfigHandler: the last config that sets
// cnmon wins; the default mounts it.
func (configHandler) Effective(configs []any) (any, error) {
	out := &configv1alpha1.MluConfig{Cnmon: configv1alpha1.MluToolMount}
	for _, c := range configs {
		if m := c.(*configv1alpha1.MluConfig).Cnmon; m != "" {
			out.Cnmon = m
		}
	}
	return out, nil
}

// toolMounts mount the host's cnmon read-only unless every device of the
// claim is configured with cnmon: None.
func (b *Backend) toolMounts(devices []plugin.AllocatedDevice) []*cdispec.Mount {
	if b.cfg.CNMON == "" {
		return nil
	}
	for _, a := range devices {
		if cfg, _ := a.Config.(*configv1alpha1.MluConfig); cfg == nil || cfg.Cnmon != configv1alpha1.MluToolNone {
			return []*cdispec.Mount{{HostPath: b.cfg.CNMON, ContainerPath: b.cfg.CNMON, Options: []string{"ro", "nosuid", "nodev", "bind"}}}
		}
	}
	return nil
}
