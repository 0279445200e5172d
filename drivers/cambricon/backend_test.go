package cambricon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/cnmonmock"
)

const (
	cards = 16
	// cardMemory is an MLU370-X8 chip's 23374 MiB rounded down to the
	// 256 MiB memory unit.
	cardMemory = 23296 << 20
	cnmonPath  = "/usr/bin/cnmon"
)

// tool is cnmon over the fake of an eight-board MLU370-X8 server.
type tool struct {
	*cnmon.Client
	mock *cnmonmock.CNMON
	// devChar is where the fake lists the capability nodes of the
	// instances it makes, as the kernel does under /sys/dev/char.
	devChar string
}

func (f *tool) devCharDir() string { return f.devChar }

func newTool(t *testing.T) *tool {
	t.Helper()
	mock, err := cnmonmock.New(cards)
	if err != nil {
		t.Fatal(err)
	}
	devChar := t.TempDir()
	mock.PublishCapabilityNodes(devChar, hardware.CambriconCapMajor)
	return &tool{Client: &cnmon.Client{Runner: mock}, mock: mock, devChar: devChar}
}

// instances lists every sMLU of the server as card/id:profile.
func (f *tool) instances(t *testing.T) []string {
	t.Helper()
	var out []string
	for card := 0; card < cards; card++ {
		info, err := f.SMLUInfo(context.Background(), card)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range info.Instances {
			out = append(out, fmt.Sprintf("%d/%d:%s", card, in.ID, cnmon.SMLUProfileName(in.VCorePercent, in.MemoryMB)))
		}
	}
	sort.Strings(out)
	return out
}

// smluOn says whether a card's sMLU mode is on.
func (f *tool) smluOn(t *testing.T, card int) bool {
	t.Helper()
	info, err := f.SMLUInfo(context.Background(), card)
	if err != nil {
		t.Fatal(err)
	}
	return info.Enabled
}

// ran lists the commands run so far that change the server: sMLU mode
// switches, creates and destroys.
func (f *tool) ran() []string {
	var out []string
	for _, c := range f.mock.Commands() {
		if len(c) > 0 && (c[0] == "set" || slices.Contains(c, "-create") || slices.Contains(c, "-destroy")) {
			out = append(out, strings.Join(c, " "))
		}
	}
	return out
}

// operatorSMLU makes an instance the way an operator would, beside the
// plugin.
func (f *tool) operatorSMLU(t *testing.T, card, vcore int, memoryMB int64) cnmon.SMLU {
	t.Helper()
	ctx := context.Background()
	if err := f.SetSMLUMode(ctx, card, true); err != nil {
		t.Fatal(err)
	}
	in, err := f.CreateSMLU(ctx, card, vcore, memoryMB)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// newBackend builds a backend on a rendered MLU370-X8 node that mounts
// cnmon; edit changes its configuration first.
func newBackend(t *testing.T, tool Tool, stateDir string, edit ...func(*Config)) (context.Context, *Backend, string) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := hardware.WriteMachine(root, hardware.MLU370X8()); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tool: tool, SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir),
		DevRoot: root, StateDir: stateDir, CNMON: cnmonPath}
	if d, ok := tool.(interface{ devCharDir() string }); ok {
		cfg.DevCharDir = d.devCharDir()
	}
	for _, e := range edit {
		e(&cfg)
	}
	b, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, b, root
}

// whole is a whole-card allocation, as a scheduler that knows consumable
// capacity records it.
func whole(device string) plugin.AllocatedDevice {
	return part(device, "100", fmt.Sprintf("%dMi", cardMemory>>20))
}

// part is an allocation of part of a card.
func part(device, vcore, vmemory string) plugin.AllocatedDevice {
	return plugin.AllocatedDevice{Device: device, ConsumedCapacity: map[resourceapi.QualifiedName]string{
		CapacityVCore: vcore, CapacityVMemory: vmemory,
	}}
}

func request(uid string, devices ...plugin.AllocatedDevice) *plugin.PrepareRequest {
	req := &plugin.PrepareRequest{Claim: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)}}}
	for i, d := range devices {
		d.Request = fmt.Sprintf("mlu%d", i)
		d.Pool = "node"
		if d.ConsumedCapacity != nil {
			d.ShareID = ptr.To(types.UID(fmt.Sprintf("%s-share-%d", uid, i)))
		}
		req.Devices = append(req.Devices, d)
	}
	return req
}

func claim(uid string) plugin.ClaimRef {
	return plugin.ClaimRef{Namespace: "ns", Name: uid, UID: types.UID(uid)}
}

func readLedger(t *testing.T, b *Backend) *ledger {
	t.Helper()
	l, err := b.ledger.Load()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ledgerClaims lists the ledger's instances as claim:card/id.
func ledgerClaims(t *testing.T, b *Backend) []string {
	t.Helper()
	var out []string
	for _, in := range readLedger(t, b).Instances {
		out = append(out, fmt.Sprintf("%s:%d/%d", in.Claim, in.Card, in.ID))
	}
	sort.Strings(out)
	return out
}

func nodes(ns []*cdispec.DeviceNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, fmt.Sprintf("%s %s %d:%d %s", n.Path, n.Type, n.Major, n.Minor, n.HostPath))
	}
	return out
}

func cardNodesWant(root string, card int) []string {
	return []string{
		fmt.Sprintf("/dev/cambricon_dev%d c %d:%d %s/dev/cambricon_dev%d", card, hardware.CambriconDevMajor, card, root, card),
		fmt.Sprintf("/dev/cambricon_ipcm%d c %d:%d %s/dev/cambricon_ipcm%d", card, hardware.CambriconIPCMMajor, card, root, card),
	}
}

func ctlNodeWant(root string) []string {
	return []string{fmt.Sprintf("/dev/cambricon_ctl c %d:0 %s/dev/cambricon_ctl", hardware.CambriconCtlMajor, root)}
}

func mounts(resp *plugin.PrepareResponse) []string {
	var out []string
	for _, m := range resp.Common.Mounts {
		out = append(out, fmt.Sprintf("%s:%s:%s", m.HostPath, m.ContainerPath, strings.Join(m.Options, ",")))
	}
	return out
}

func values(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[string]any {
	out := map[string]any{}
	for k, a := range attrs {
		switch {
		case a.StringValue != nil:
			out[string(k)] = *a.StringValue
		case a.IntValue != nil:
			out[string(k)] = *a.IntValue
		case a.BoolValue != nil:
			out[string(k)] = *a.BoolValue
		case a.VersionValue != nil:
			out[string(k)] = "version " + *a.VersionValue
		}
	}
	return out
}

// capacity describes a device's capacity as value/default/min/step.
func capacity(d resourceapi.Device, name resourceapi.QualifiedName) string {
	c, ok := d.Capacity[name]
	if !ok {
		return "missing"
	}
	p := c.RequestPolicy
	if p == nil || p.Default == nil || p.ValidRange == nil || p.ValidRange.Min == nil || p.ValidRange.Step == nil || p.ValidRange.Max != nil {
		return fmt.Sprintf("%s with request policy %+v", c.Value.String(), p)
	}
	return fmt.Sprintf("%d/%d/%d/%d", c.Value.Value(), p.Default.Value(), p.ValidRange.Min.Value(), p.ValidRange.Step.Value())
}

func devicesByName(t *testing.T, ctx context.Context, b *Backend) map[string]resourceapi.Device {
	t.Helper()
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]resourceapi.Device{}
	for _, d := range inv.Devices {
		out[d.Name] = d
	}
	if len(out) != len(inv.Devices) {
		t.Fatalf("%d devices with %d names", len(inv.Devices), len(out))
	}
	return out
}

func TestDiscoverMLU370X8(t *testing.T) {
	ctx, b, _ := newBackend(t, newTool(t), t.TempDir())
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != cards || len(inv.SharedCounters) != 0 {
		t.Fatalf("%d devices and %d counter sets, want 16 and none", len(inv.Devices), len(inv.SharedCounters))
	}
	layout := hardware.MLU370X8().MLUs()
	switches := map[string]int{} // switch -> board
	uuids := map[string]bool{}
	for i, d := range inv.Devices {
		name := fmt.Sprintf("mlu-%d", i)
		if d.Name != name {
			t.Errorf("device %d is %s, want %s", i, d.Name, name)
			continue
		}
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			t.Errorf("%s does not allow multiple allocations", name)
		}
		if got, want := capacity(d, CapacityVCore), "100/100/1/1"; got != want {
			t.Errorf("%s vcore %s, want %s", name, got, want)
		}
		if got, want := capacity(d, CapacityVMemory), fmt.Sprintf("%d/%d/%d/%d", cardMemory, cardMemory, 256<<20, 256<<20); got != want {
			t.Errorf("%s vmemory %s, want %s", name, got, want)
		}
		if q := d.Capacity[CapacityVMemory].Value; q.String() != "23296Mi" {
			t.Errorf("%s vmemory %s, want 23296Mi", name, q.String())
		}
		got := values(d.Attributes)
		numa := int64(0)
		if i >= 8 {
			numa = 1
		}
		want := map[string]any{
			"type": "mlu", "productName": "MLU370-X8", "card": int64(i), "driverVersion": "version 5.10.31",
			"mluCores": int64(16), "mluClusters": int64(4), "firmware": "v1.1.6", "eccEnabled": false,
			"accelerator.strata.sh/type": "mlu", "accelerator.strata.sh/vendor": "cambricon", "accelerator.strata.sh/model": "MLU370",
			"accelerator.strata.sh/whole": true, "accelerator.strata.sh/memory": int64(cardMemory),
			"accelerator.strata.sh/partition2": fmt.Sprintf("board-%d", i/2),
			"accelerator.strata.sh/partition8": fmt.Sprintf("mlulink-%d", i/8),
			"accelerator.strata.sh/numaNode":   numa,
			"resource.kubernetes.io/pcieRoot":  layout[i].Root(), "resource.kubernetes.io/pciBusID": layout[i].BusID(),
			"resource.kubernetes.io/numaNode": numa,
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s %s = %v, want %v", name, k, got[k], v)
			}
		}
		uuid, _ := got["uuid"].(string)
		if uuid == "" || uuids[uuid] {
			t.Errorf("%s uuid %q is empty or not unique", name, uuid)
		}
		uuids[uuid] = true
		sw, _ := got["topology.strata.sh/pcieSwitch"].(string)
		if sw == "" || got["accelerator.strata.sh/pcieSwitch"] != sw {
			t.Errorf("%s PCIe switch %q, accelerator.strata.sh/pcieSwitch %v", name, sw, got["accelerator.strata.sh/pcieSwitch"])
		}
		if board, seen := switches[sw]; seen && board != i/2 {
			t.Errorf("%s shares PCIe switch %s with board %d", name, sw, board)
		}
		switches[sw] = i / 2
	}
	if len(switches) != 8 {
		t.Errorf("%d PCIe switches, want one per board: %v", len(switches), switches)
	}
	// Spot checks against the real boards: cards 2 and 3 are the chips at
	// 39 and 3D of one board, and card 0 carries the fake's first UUID.
	byName := devicesByName(t, ctx, b)
	if got := values(byName["mlu-3"].Attributes); got["resource.kubernetes.io/pciBusID"] != "0000:3d:00.0" || got["resource.kubernetes.io/pcieRoot"] != "pci0000:36" ||
		got["topology.strata.sh/pcieSwitch"] != values(byName["mlu-2"].Attributes)["topology.strata.sh/pcieSwitch"] {
		t.Errorf("mlu-3 topology %v", got)
	}
	if got := values(byName["mlu-0"].Attributes)["uuid"]; got != "89033010-2354-0000-0000-000000000000" {
		t.Errorf("mlu-0 uuid %v", got)
	}
}

func TestMemoryUnitSetsTheVMemoryStep(t *testing.T) {
	ctx, b, _ := newBackend(t, newTool(t), t.TempDir(), func(c *Config) { c.MemoryUnit = 1 << 20 })
	d := devicesByName(t, ctx, b)["mlu-5"]
	if got, want := capacity(d, CapacityVMemory), fmt.Sprintf("%d/%d/%d/%d", 23374<<20, 23374<<20, 1<<20, 1<<20); got != want {
		t.Errorf("vmemory %s, want %s", got, want)
	}
}

func TestWholeCardPrepare(t *testing.T) {
	for name, dev := range map[string]plugin.AllocatedDevice{
		"all of both capacities":    whole("mlu-5"),
		"in another notation":       part("mlu-5", "100", fmt.Sprint(cardMemory)),
		"without consumed capacity": {Device: "mlu-5"},
	} {
		t.Run(name, func(t *testing.T) {
			tool := newTool(t)
			ctx, b, root := newBackend(t, tool, t.TempDir())
			resp, err := b.Prepare(ctx, request("c1", dev))
			if err != nil {
				t.Fatal(err)
			}
			if got := tool.ran(); len(got) != 0 {
				t.Errorf("a whole-card claim ran %q", got)
			}
			if got := tool.instances(t); len(got) != 0 {
				t.Errorf("a whole-card claim made sMLUs %v", got)
			}
			if len(resp.Devices) != 1 {
				t.Fatalf("%d prepared devices", len(resp.Devices))
			}
			d := resp.Devices[0]
			if d.Device != "mlu-5" || d.Request != "mlu0" || d.Pool != "node" || !slices.Equal(nodes(d.Edits.DeviceNodes), cardNodesWant(root, 5)) {
				t.Errorf("prepared device %s/%s/%s with nodes %q, want %q", d.Request, d.Pool, d.Device, nodes(d.Edits.DeviceNodes), cardNodesWant(root, 5))
			}
			if len(d.State) != 0 {
				t.Errorf("state %s for a whole card", d.State)
			}
			if got := nodes(resp.Common.DeviceNodes); !slices.Equal(got, ctlNodeWant(root)) {
				t.Errorf("common nodes %q, want %q", got, ctlNodeWant(root))
			}
			if !slices.Equal(resp.Common.Env, []string{"CAMBRICON_VISIBLE_DEVICES=5"}) {
				t.Errorf("env %q", resp.Common.Env)
			}
			if got := mounts(resp); !slices.Equal(got, []string{"/usr/bin/cnmon:/usr/bin/cnmon:ro,nosuid,nodev,bind"}) {
				t.Errorf("mounts %q", got)
			}
			if l := readLedger(t, b); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
				t.Errorf("ledger %+v", l)
			}
			if err := b.Unprepare(ctx, claim("c1"), resp.Devices); err != nil {
				t.Fatal(err)
			}
			if got := tool.ran(); len(got) != 0 {
				t.Errorf("unpreparing a whole card ran %q", got)
			}
		})
	}
}

func TestWholeCardsOfOneClaimAreListedInCardOrder(t *testing.T) {
	tool := newTool(t)
	ctx, b, root := newBackend(t, tool, t.TempDir())
	resp, err := b.Prepare(ctx, request("c1", whole("mlu-9"), whole("mlu-2")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.Common.Env, []string{"CAMBRICON_VISIBLE_DEVICES=2,9"}) {
		t.Errorf("env %q", resp.Common.Env)
	}
	if len(resp.Devices) != 2 || resp.Devices[0].Device != "mlu-9" || !slices.Equal(nodes(resp.Devices[1].Edits.DeviceNodes), cardNodesWant(root, 2)) {
		t.Errorf("devices %+v, want mlu-9 then mlu-2 in request order", resp.Devices)
	}
}

func TestCnmonMountFollowsTheConfig(t *testing.T) {
	const mount = "/usr/bin/cnmon:/usr/bin/cnmon:ro,nosuid,nodev,bind"
	for name, tc := range map[string]struct {
		cnmon   string
		configs []any
		want    []string
	}{
		"no config":            {cnmonPath, []any{nil}, []string{mount}},
		"mount":                {cnmonPath, []any{&configv1alpha1.MluConfig{Cnmon: configv1alpha1.MluToolMount}}, []string{mount}},
		"none":                 {cnmonPath, []any{&configv1alpha1.MluConfig{Cnmon: configv1alpha1.MluToolNone}}, nil},
		"one of two wants it":  {cnmonPath, []any{&configv1alpha1.MluConfig{Cnmon: configv1alpha1.MluToolNone}, &configv1alpha1.MluConfig{Cnmon: configv1alpha1.MluToolMount}}, []string{mount}},
		"no cnmon on the host": {"", []any{nil}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, b, _ := newBackend(t, newTool(t), t.TempDir(), func(c *Config) { c.CNMON = tc.cnmon })
			var devs []plugin.AllocatedDevice
			for i, cfg := range tc.configs {
				d := whole(fmt.Sprintf("mlu-%d", i))
				d.Config = cfg
				devs = append(devs, d)
			}
			resp, err := b.Prepare(ctx, request("c1", devs...))
			if err != nil {
				t.Fatal(err)
			}
			if got := mounts(resp); !slices.Equal(got, tc.want) {
				t.Errorf("mounts %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSMLUCreatedOnPrepareAndDestroyedOnUnprepare(t *testing.T) {
	tool := newTool(t)
	ctx, b, root := newBackend(t, tool, t.TempDir())
	if tool.smluOn(t, 6) {
		t.Fatal("card 6 starts with sMLU mode on")
	}
	resp, err := b.Prepare(ctx, request("c1", part("mlu-6", "10", "1Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if !tool.smluOn(t, 6) {
		t.Error("sMLU mode of card 6 is off after preparing a share")
	}
	info, err := tool.SMLUInfo(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Instances) != 1 || info.Instances[0].ID != 1 || info.Instances[0].VCorePercent != 10 || info.Instances[0].MemoryMB != 1024 {
		t.Fatalf("instances of card 6: %+v, want instance 1 of 10%% and 1024 MiB", info.Instances)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"6/1:10p.1024mb"}) {
		t.Errorf("sMLUs %v, want only card 6's", got)
	}
	d := resp.Devices[0]
	wantNodes := append(cardNodesWant(root, 6), fmt.Sprintf("/dev/cambricon-caps/cap_dev6_mi1 c %d:0 %s/dev/cambricon-caps/cap_dev6_mi1", hardware.CambriconCapMajor, root))
	if got := nodes(d.Edits.DeviceNodes); !slices.Equal(got, wantNodes) {
		t.Errorf("device nodes %q, want %q", got, wantNodes)
	}
	if d.ShareID == nil || *d.ShareID != "c1-share-0" {
		t.Errorf("share id %v", d.ShareID)
	}
	if got := nodes(resp.Common.DeviceNodes); !slices.Equal(got, ctlNodeWant(root)) {
		t.Errorf("common nodes %q", got)
	}
	if want := []string{"CAMBRICON_VISIBLE_DEVICES=6", "CAMBRICON_DSMLU_PROFILE=10p.1024mb"}; !slices.Equal(resp.Common.Env, want) {
		t.Errorf("env %q, want %q", resp.Common.Env, want)
	}
	var st instance
	if err := json.Unmarshal(d.State, &st); err != nil || st.Card != 6 || st.ID != 1 {
		t.Errorf("state %s: %v", d.State, err)
	}
	l := readLedger(t, b)
	want := instance{Claim: "c1", Device: "mlu-6", ShareID: ptr.To(types.UID("c1-share-0")), Card: 6, ID: 1, VCore: 10, MemoryMB: 1024}
	if len(l.Instances) != 1 || l.Instances[0].Claim != want.Claim || l.Instances[0].Device != want.Device || *l.Instances[0].ShareID != *want.ShareID ||
		l.Instances[0].Card != want.Card || l.Instances[0].ID != want.ID || l.Instances[0].VCore != want.VCore || l.Instances[0].MemoryMB != want.MemoryMB ||
		!slices.Equal(l.Extra.SMLUOn, []int{6}) {
		t.Errorf("ledger %+v, want %+v and card 6 switched on", l, want)
	}
	// The plugin's own instance is the claim's: the card is published
	// whole, the allocator accounting for the share.
	if got := capacity(devicesByName(t, ctx, b)["mlu-6"], CapacityVCore); got != "100/100/1/1" {
		t.Errorf("mlu-6 vcore %s while the plugin's share is prepared", got)
	}

	if err := b.Unprepare(ctx, claim("c1"), resp.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); len(got) != 0 {
		t.Errorf("after unprepare: %v", got)
	}
	if tool.smluOn(t, 6) {
		t.Error("sMLU mode of card 6 is still on after its last share went")
	}
	if l := readLedger(t, b); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
		t.Errorf("ledger after unprepare %+v", l)
	}
	before := tool.ran()
	if err := b.Unprepare(ctx, claim("c1"), resp.Devices); err != nil {
		t.Fatalf("second unprepare: %v", err)
	}
	if got := tool.ran(); !slices.Equal(got, before) {
		t.Errorf("a second unprepare ran %q", got[len(before):])
	}
}

func TestSharesOfOneCardGetTheirOwnInstances(t *testing.T) {
	tool := newTool(t)
	ctx, b, root := newBackend(t, tool, t.TempDir())
	r1, err := b.Prepare(ctx, request("c1", part("mlu-4", "30", "2Gi")))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Prepare(ctx, request("c2", part("mlu-4", "20", "4Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"4/1:30p.2048mb", "4/2:20p.4096mb"}) {
		t.Fatalf("sMLUs %v", got)
	}
	capNode := func(r *plugin.PrepareResponse) string {
		ns := nodes(r.Devices[0].Edits.DeviceNodes)
		return ns[len(ns)-1]
	}
	if c1, c2 := capNode(r1), capNode(r2); c1 != fmt.Sprintf("/dev/cambricon-caps/cap_dev4_mi1 c %d:0 %s/dev/cambricon-caps/cap_dev4_mi1", hardware.CambriconCapMajor, root) ||
		c2 != fmt.Sprintf("/dev/cambricon-caps/cap_dev4_mi2 c %d:1 %s/dev/cambricon-caps/cap_dev4_mi2", hardware.CambriconCapMajor, root) {
		t.Errorf("capability nodes %q and %q", c1, c2)
	}
	if !slices.Contains(r2.Common.Env, "CAMBRICON_DSMLU_PROFILE=20p.4096mb") {
		t.Errorf("c2 env %q", r2.Common.Env)
	}
	if got := ledgerClaims(t, b); !slices.Equal(got, []string{"c1:4/1", "c2:4/2"}) {
		t.Errorf("ledger %v", got)
	}
	if err := b.Unprepare(ctx, claim("c1"), r1.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"4/2:20p.4096mb"}) || !tool.smluOn(t, 4) {
		t.Errorf("after unpreparing c1: sMLUs %v, mode on %v; want c2's, on", got, tool.smluOn(t, 4))
	}
	if err := b.Unprepare(ctx, claim("c2"), r2.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); len(got) != 0 || tool.smluOn(t, 4) {
		t.Errorf("after unpreparing c2: sMLUs %v, mode on %v", got, tool.smluOn(t, 4))
	}
}

func TestSharesNeverOvercommitACard(t *testing.T) {
	tool := newTool(t)
	ctx, b, _ := newBackend(t, tool, t.TempDir())
	if _, err := b.Prepare(ctx, request("c1", part("mlu-4", "60", "4Gi"))); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		dev  plugin.AllocatedDevice
		want string
	}{
		"quota":  {part("mlu-4", "50", "1Gi"), "insufficient MLU quota"},
		"memory": {part("mlu-4", "10", "20Gi"), "insufficient memory"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := b.Prepare(ctx, request("c2", tc.dev))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("prepare: %v, want a refusal for %s", err, tc.want)
			}
			if got := tool.instances(t); !slices.Equal(got, []string{"4/1:60p.4096mb"}) {
				t.Errorf("sMLUs %v, want c1's only", got)
			}
			if got := ledgerClaims(t, b); !slices.Equal(got, []string{"c1:4/1"}) {
				t.Errorf("ledger %v, want c1's only", got)
			}
			if !tool.smluOn(t, 4) {
				t.Error("sMLU mode of card 4 went off under c1's share")
			}
		})
	}
	// Two shares of one claim that do not fit together (no allocator
	// would hand them out; prepare must still undo the first), on a card
	// the plugin switches on for them: nothing stays, the mode included.
	tool.mock.ResetCommands()
	_, err := b.Prepare(ctx, request("c3", part("mlu-8", "60", "1Gi"), part("mlu-8", "50", "1Gi")))
	if err == nil {
		t.Fatal("prepare of 110% of card 8 succeeded")
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"4/1:60p.4096mb"}) {
		t.Errorf("sMLUs %v, want c1's only", got)
	}
	if tool.smluOn(t, 8) {
		t.Error("sMLU mode of card 8 stays on after a failed prepare")
	}
	if l := readLedger(t, b); len(l.Instances) != 1 || !slices.Equal(l.Extra.SMLUOn, []int{4}) {
		t.Errorf("ledger %+v, want c1's instance and card 4 on", l)
	}
	want := []string{"set -c 8 -smlu on", "smlu -c 8 -create -mlu 60 -mem 1024", "smlu -c 8 -create -mlu 50 -mem 1024", "smlu -c 8 -destroy 1", "set -c 8 -smlu off"}
	if got := tool.ran(); !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
}

func TestFailedSecondDeviceUndoesTheFirst(t *testing.T) {
	tool := newTool(t)
	ctx, b, _ := newBackend(t, tool, t.TempDir())
	// An operator's instance holds 95% of card 2.
	tool.operatorSMLU(t, 2, 95, 1024)
	_, err := b.Prepare(ctx, request("c1", part("mlu-1", "10", "1Gi"), part("mlu-2", "10", "1Gi")))
	if err == nil || !strings.Contains(err.Error(), "insufficient MLU quota") {
		t.Fatalf("prepare: %v, want card 2's refusal", err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"2/1:95p.1024mb"}) {
		t.Errorf("sMLUs %v, want the operator's only", got)
	}
	if tool.smluOn(t, 1) || !tool.smluOn(t, 2) {
		t.Errorf("sMLU mode: card 1 %v, card 2 %v; want off (the plugin's) and on (the operator's)", tool.smluOn(t, 1), tool.smluOn(t, 2))
	}
	if l := readLedger(t, b); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
		t.Errorf("ledger %+v", l)
	}

	// A device that is not on this node fails after the first was made.
	_, err = b.Prepare(ctx, request("c2", part("mlu-3", "10", "1Gi"), whole("mlu-16")))
	if err == nil || !strings.Contains(err.Error(), "mlu-16") {
		t.Fatalf("prepare: %v, want mlu-16 refused", err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"2/1:95p.1024mb"}) || tool.smluOn(t, 3) {
		t.Errorf("sMLUs %v, card 3 on %v; want the operator's only, off", got, tool.smluOn(t, 3))
	}
}

func TestRestartReconcilesTheLedger(t *testing.T) {
	tool := newTool(t)
	state := t.TempDir()
	ctx, b, _ := newBackend(t, tool, state)
	if _, err := b.Prepare(ctx, request("c1", part("mlu-3", "25", "2Gi"))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(ctx, request("c2", part("mlu-5", "50", "8Gi"))); err != nil {
		t.Fatal(err)
	}
	// An operator's instance: 30% and 4000 MiB of card 7.
	tool.operatorSMLU(t, 7, 30, 4000)
	// One on a card the plugin switched on, beside a claim's share.
	tool.operatorSMLU(t, 3, 10, 512)

	_, restarted, _ := newBackend(t, tool, state)
	if err := restarted.Reconcile(ctx, []plugin.ClaimState{{ClaimRef: claim("c1"), Phase: "Prepared"}}); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"3/1:25p.2048mb", "3/2:10p.512mb", "7/1:30p.4000mb"}) {
		t.Errorf("sMLUs %v, want c1's and the operator's", got)
	}
	if tool.smluOn(t, 5) || !tool.smluOn(t, 3) {
		t.Errorf("sMLU mode: card 5 %v, card 3 %v; want off, on", tool.smluOn(t, 5), tool.smluOn(t, 3))
	}
	if got := ledgerClaims(t, restarted); !slices.Equal(got, []string{"c1:3/1"}) {
		t.Errorf("ledger %v", got)
	}

	// The operator's instances hold their share; the plugin's does not
	// count against its card twice.
	devs := devicesByName(t, ctx, restarted)
	if got, want := capacity(devs["mlu-7"], CapacityVCore), "70/70/1/1"; got != want {
		t.Errorf("mlu-7 vcore %s, want %s", got, want)
	}
	// 23296 - 4000 = 19296 MiB, rounded down to 256 MiB: 19200 MiB.
	if got, want := capacity(devs["mlu-7"], CapacityVMemory), fmt.Sprintf("%d/%d/%d/%d", 19200<<20, 19200<<20, 256<<20, 256<<20); got != want {
		t.Errorf("mlu-7 vmemory %s, want %s", got, want)
	}
	if got, want := capacity(devs["mlu-3"], CapacityVCore), "90/90/1/1"; got != want {
		t.Errorf("mlu-3 vcore %s, want %s (the operator's 10%% only)", got, want)
	}
	if got, want := capacity(devs["mlu-5"], CapacityVCore), "100/100/1/1"; got != want {
		t.Errorf("mlu-5 vcore %s, want %s", got, want)
	}
	// A card the operator holds part of is not whole to vendor-neutral
	// claims, and offers the memory left; one the plugin shares still is.
	for name, want := range map[string]struct {
		whole  bool
		memory int64
	}{"mlu-7": {false, 19200 << 20}, "mlu-5": {true, 23296 << 20}} {
		d := devs[name]
		if w, m := *d.Attributes["accelerator.strata.sh/whole"].BoolValue, *d.Attributes["accelerator.strata.sh/memory"].IntValue; w != want.whole || m != want.memory {
			t.Errorf("%s: whole %v memory %d, want %v and %d", name, w, m, want.whole, want.memory)
		}
	}

	// No claim prepared any more: c1's instance goes, the operator's stay,
	// and so does the mode of the cards they are on.
	if err := restarted.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"3/2:10p.512mb", "7/1:30p.4000mb"}) {
		t.Errorf("sMLUs %v, want the operator's", got)
	}
	if !tool.smluOn(t, 3) || !tool.smluOn(t, 7) {
		t.Error("sMLU mode switched off under an operator's instance")
	}
	// Once the operator's instance on card 3 is gone, the card the plugin
	// switched on is switched back.
	if err := tool.DestroySMLU(ctx, 3, 2); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if tool.smluOn(t, 3) || !tool.smluOn(t, 7) {
		t.Errorf("sMLU mode: card 3 %v, card 7 %v; want off, on (never the plugin's)", tool.smluOn(t, 3), tool.smluOn(t, 7))
	}
	if l := readLedger(t, restarted); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
		t.Errorf("ledger %+v", l)
	}
}

// An unprepare from the checkpoint after a restart (identities only) finds
// the instance in the ledger.
func TestUnprepareAfterRestart(t *testing.T) {
	tool := newTool(t)
	state := t.TempDir()
	ctx, b, _ := newBackend(t, tool, state)
	if _, err := b.Prepare(ctx, request("c1", part("mlu-11", "40", "3Gi"))); err != nil {
		t.Fatal(err)
	}
	_, restarted, _ := newBackend(t, tool, state)
	if err := restarted.Unprepare(ctx, claim("c1"), []plugin.PreparedDevice{{Device: "mlu-11"}}); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); len(got) != 0 || tool.smluOn(t, 11) {
		t.Errorf("sMLUs %v, card 11 on %v", got, tool.smluOn(t, 11))
	}
}

func TestValidate(t *testing.T) {
	ctx, b, _ := newBackend(t, newTool(t), t.TempDir())
	if err := b.Validate(ctx, request("c1", whole("mlu-0"), part("mlu-15", "1", "256Mi"), plugin.AllocatedDevice{Device: "mlu-7"})); err != nil {
		t.Errorf("valid claim: %v", err)
	}
	for name, tc := range map[string]struct {
		dev  plugin.AllocatedDevice
		want []string
	}{
		"unknown device":   {whole("mlu-16"), []string{"mlu-16"}},
		"no vcore":         {part("mlu-2", "0", "1Gi"), []string{"mlu-2", "vcore"}},
		"too much vcore":   {part("mlu-3", "150", "1Gi"), []string{"mlu-3", "vcore"}},
		"too much vmemory": {part("mlu-4", "10", "23297Mi"), []string{"mlu-4", "vmemory"}},
		"unparsable vcore": {part("mlu-5", "lots", "1Gi"), []string{"mlu-5", "vcore"}},
		"part of a MiB":    {part("mlu-6", "10", "1025Ki"), []string{"mlu-6", "vmemory"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := b.Validate(ctx, request("c1", whole("mlu-1"), tc.dev))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not name %s", err, w)
				}
			}
			if strings.Contains(err.Error(), "mlu-1:") || strings.Contains(err.Error(), "mlu-1 ") {
				t.Errorf("%q blames the valid device", err)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := hardware.WriteMachine(root, hardware.MLU370X8()); err != nil {
		t.Fatal(err)
	}
	cfg := func() Config {
		return Config{Tool: newTool(t), SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir), DevRoot: root, StateDir: t.TempDir()}
	}
	for name, tc := range map[string]struct {
		cfg  func() Config
		want string
	}{
		"a memory unit of part of a MiB": {func() Config { c := cfg(); c.MemoryUnit = 256<<20 + 512<<10; return c }, "MiB"},
		"a memory unit under a MiB":      {func() Config { c := cfg(); c.MemoryUnit = 512 << 10; return c }, "MiB"},
		"no state directory":             {func() Config { c := cfg(); c.StateDir = ""; return c }, "state directory"},
		"no cnmon":                       {func() Config { c := cfg(); c.Tool = nil; return c }, "cnmon"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(ctx, tc.cfg()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error about %s", err, tc.want)
			}
		})
	}
	t.Run("no Cambricon driver in proc/devices", func(t *testing.T) {
		proc := t.TempDir()
		if err := os.WriteFile(filepath.Join(proc, "devices"), []byte("Character devices:\n  1 mem\n195 nvidia-frontend\n\nBlock devices:\n241 cambricon_dev\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c := cfg()
		c.ProcRoot = proc
		if _, err := New(ctx, c); err == nil || !strings.Contains(err.Error(), "cambricon_ctl") {
			t.Errorf("New: %v, want an error naming cambricon_ctl", err)
		}
	})
}

func TestConfigHandler(t *testing.T) {
	_, b, _ := newBackend(t, newTool(t), t.TempDir())
	h := b.ConfigHandler()
	decode := func(raw string) any {
		t.Helper()
		v, err := h.Decode([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const (
		none  = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"None"}`
		mount = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Mount"}`
		unset = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig"}`
	)
	for name, tc := range map[string]struct {
		raws []string
		want configv1alpha1.MluToolMode
	}{
		"default":                    {nil, configv1alpha1.MluToolMount},
		"unset":                      {[]string{unset}, configv1alpha1.MluToolMount},
		"none":                       {[]string{none}, configv1alpha1.MluToolNone},
		"class none, claim mount":    {[]string{none, mount}, configv1alpha1.MluToolMount},
		"class mount, claim none":    {[]string{mount, none}, configv1alpha1.MluToolNone},
		"class none, claim says not": {[]string{none, unset}, configv1alpha1.MluToolNone},
	} {
		t.Run(name, func(t *testing.T) {
			var configs []any
			for _, raw := range tc.raws {
				configs = append(configs, decode(raw))
			}
			got, err := h.Effective(configs)
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := got.(*configv1alpha1.MluConfig); !ok || c.Cnmon != tc.want {
				t.Errorf("effective %#v, want cnmon %s", got, tc.want)
			}
		})
	}
	for raw, want := range map[string]string{
		`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"None","driver":"None"}`: "driver",
		`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Copy"}`:                 "Unsupported value",
		`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig"}`:                                "MluConfig",
	} {
		if _, err := h.Decode([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("decode %s: %v, want an error about %s", raw, err, want)
		}
	}
}

// A plugin stopped between recording an instance and cnmon making it, or
// between cnmon making it and returning: a restarted plugin with no claim
// prepared switches the card back and destroys what was made.
func TestInterruptedPrepareIsCleanedUp(t *testing.T) {
	for name, made := range map[string]bool{"before cnmon made it": false, "after cnmon made it": true} {
		t.Run(name, func(t *testing.T) {
			tool := newTool(t)
			state := t.TempDir()
			ctx, b, _ := newBackend(t, tool, state)
			if err := b.ledger.Save(&ledger{Instances: []instance{{Claim: "c1", Device: "mlu-9", Card: 9, ID: 1, VCore: 20, MemoryMB: 2048}}, Extra: smluModes{SMLUOn: []int{9}}}); err != nil {
				t.Fatal(err)
			}
			if err := tool.SetSMLUMode(ctx, 9, true); err != nil {
				t.Fatal(err)
			}
			if made {
				if _, err := tool.CreateSMLU(ctx, 9, 20, 2048); err != nil {
					t.Fatal(err)
				}
			}
			_, restarted, _ := newBackend(t, tool, state)
			if err := restarted.Reconcile(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if got := tool.instances(t); len(got) != 0 || tool.smluOn(t, 9) {
				t.Errorf("sMLUs %v, card 9 on %v", got, tool.smluOn(t, 9))
			}
			if l := readLedger(t, restarted); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
				t.Errorf("ledger %+v", l)
			}
		})
	}
}

// failing is cnmon that refuses to switch sMLU mode or destroy an
// instance, as the driver does while a process has the card or instance
// open.
type failing struct {
	*tool
	busy bool
}

func (f *failing) SetSMLUMode(ctx context.Context, card int, on bool) error {
	if f.busy {
		return fmt.Errorf("Set card %d sMLU mode failed: This card is busy", card)
	}
	return f.tool.SetSMLUMode(ctx, card, on)
}

func (f *failing) DestroySMLU(ctx context.Context, card, id int) error {
	if f.busy {
		return fmt.Errorf("Destroy sMLU instance %d on card %d failed: instance is busy", id, card)
	}
	return f.tool.DestroySMLU(ctx, card, id)
}

func TestBusyInstanceIsKeptForARetry(t *testing.T) {
	f := &failing{tool: newTool(t)}
	ctx, b, _ := newBackend(t, f, t.TempDir())
	resp, err := b.Prepare(ctx, request("c1", part("mlu-10", "50", "4Gi")))
	if err != nil {
		t.Fatal(err)
	}
	f.busy = true
	if err := b.Unprepare(ctx, claim("c1"), resp.Devices); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("unprepare of a busy instance: %v", err)
	}
	if got := f.instances(t); !slices.Equal(got, []string{"10/1:50p.4096mb"}) || !f.smluOn(t, 10) {
		t.Errorf("sMLUs %v, card 10 on %v", got, f.smluOn(t, 10))
	}
	if got := ledgerClaims(t, b); !slices.Equal(got, []string{"c1:10/1"}) {
		t.Errorf("ledger %v, want c1's instance kept", got)
	}
	f.busy = false
	if err := b.Unprepare(ctx, claim("c1"), resp.Devices); err != nil {
		t.Fatal(err)
	}
	if got := f.instances(t); len(got) != 0 || f.smluOn(t, 10) {
		t.Errorf("after the retry: sMLUs %v, card 10 on %v", got, f.smluOn(t, 10))
	}
}

func TestBusyCardRefusesAShare(t *testing.T) {
	f := &failing{tool: newTool(t), busy: true}
	ctx, b, _ := newBackend(t, f, t.TempDir())
	if _, err := b.Prepare(ctx, request("c1", part("mlu-12", "50", "4Gi"))); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("prepare on a busy card: %v", err)
	}
	if got := f.instances(t); len(got) != 0 || f.smluOn(t, 12) {
		t.Errorf("sMLUs %v, card 12 on %v", got, f.smluOn(t, 12))
	}
	if l := readLedger(t, b); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
		t.Errorf("ledger %+v", l)
	}
}

// A share that takes all of one capacity and part of the other is an
// sMLU, not the whole card.
func TestPartOfOneCapacityIsAnSMLU(t *testing.T) {
	for name, tc := range map[string]struct {
		dev     plugin.AllocatedDevice
		profile string
	}{
		"all the time, part of the memory": {part("mlu-13", "100", "1Gi"), "100p.1024mb"},
		"part of the time, all the memory": {part("mlu-13", "50", "23296Mi"), "50p.23296mb"},
		"only vcore consumed":              {plugin.AllocatedDevice{Device: "mlu-13", ConsumedCapacity: map[resourceapi.QualifiedName]string{CapacityVCore: "50"}}, "50p.23296mb"},
	} {
		t.Run(name, func(t *testing.T) {
			tool := newTool(t)
			ctx, b, _ := newBackend(t, tool, t.TempDir())
			resp, err := b.Prepare(ctx, request("c1", tc.dev))
			if err != nil {
				t.Fatal(err)
			}
			if got := tool.instances(t); !slices.Equal(got, []string{"13/1:" + tc.profile}) {
				t.Errorf("sMLUs %v, want one of %s on card 13", got, tc.profile)
			}
			if !slices.Contains(resp.Common.Env, EnvSMLUProfile+"="+tc.profile) {
				t.Errorf("env %q", resp.Common.Env)
			}
		})
	}
}

// racing is cnmon on a card where an operator makes an instance just
// before the plugin's create runs: the driver hands the plugin another id
// than the one it recorded.
type racing struct {
	*tool
	card, vcore int
	memoryMB    int64
}

func (r *racing) CreateSMLU(ctx context.Context, card, vcore int, memoryMB int64) (cnmon.SMLU, error) {
	if card == r.card {
		r.card = -1
		if _, err := r.tool.CreateSMLU(ctx, card, r.vcore, r.memoryMB); err != nil {
			return cnmon.SMLU{}, err
		}
	}
	return r.tool.CreateSMLU(ctx, card, vcore, memoryMB)
}

func TestInstanceIDTheDriverGaveIsRecorded(t *testing.T) {
	r := &racing{tool: newTool(t), card: 14, vcore: 5, memoryMB: 512}
	ctx, b, root := newBackend(t, r, t.TempDir())
	resp, err := b.Prepare(ctx, request("c1", part("mlu-14", "10", "1Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.instances(t); !slices.Equal(got, []string{"14/1:5p.512mb", "14/2:10p.1024mb"}) {
		t.Fatalf("sMLUs %v, want the operator's 1 and c1's 2", got)
	}
	if got := ledgerClaims(t, b); !slices.Equal(got, []string{"c1:14/2"}) {
		t.Errorf("ledger %v, want c1's instance 2", got)
	}
	ns := nodes(resp.Devices[0].Edits.DeviceNodes)
	if want := fmt.Sprintf("/dev/cambricon-caps/cap_dev14_mi2 c %d:1 %s/dev/cambricon-caps/cap_dev14_mi2", hardware.CambriconCapMajor, root); ns[len(ns)-1] != want {
		t.Errorf("capability node %q, want %q", ns[len(ns)-1], want)
	}
	if err := b.Unprepare(ctx, claim("c1"), resp.Devices); err != nil {
		t.Fatal(err)
	}
	if got := r.instances(t); !slices.Equal(got, []string{"14/1:5p.512mb"}) || !r.smluOn(t, 14) {
		t.Errorf("sMLUs %v, card 14 on %v; want the operator's, on", got, r.smluOn(t, 14))
	}
}

// An instance of the ledger that went outside the plugin (destroyed by an
// operator, or by a driver reload) leaves its id to the driver to hand out
// again: unpreparing its claim must not destroy the claim that now has it.
func TestVanishedInstanceDoesNotTakeAnotherClaimsID(t *testing.T) {
	tool := newTool(t)
	ctx, b, _ := newBackend(t, tool, t.TempDir())
	r1, err := b.Prepare(ctx, request("c1", part("mlu-0", "10", "1Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.DestroySMLU(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	r2, err := b.Prepare(ctx, request("c2", part("mlu-0", "20", "2Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"0/1:20p.2048mb"}) {
		t.Fatalf("sMLUs %v, want c2's as instance 1", got)
	}
	if err := b.Unprepare(ctx, claim("c1"), r1.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"0/1:20p.2048mb"}) {
		t.Errorf("unpreparing c1 left sMLUs %v, want c2's", got)
	}
	if got := ledgerClaims(t, b); !slices.Equal(got, []string{"c2:0/1"}) {
		t.Errorf("ledger %v, want c2's only", got)
	}
	// A stale entry whose id someone else's instance took later is not
	// destroyed either: the instance's size is not the entry's.
	r3, err := b.Prepare(ctx, request("c3", part("mlu-1", "10", "1Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.DestroySMLU(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	tool.operatorSMLU(t, 1, 30, 4000)
	if err := b.Unprepare(ctx, claim("c3"), r3.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"0/1:20p.2048mb", "1/1:30p.4000mb"}) {
		t.Errorf("unpreparing c3 left sMLUs %v, want c2's and the operator's", got)
	}
	if err := b.Unprepare(ctx, claim("c2"), r2.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"1/1:30p.4000mb"}) || tool.smluOn(t, 0) {
		t.Errorf("sMLUs %v, card 0 on %v", got, tool.smluOn(t, 0))
	}
}

// A driver older than 5.10.27 has no sMLU: no cambricon_smlu_cap region.
// Whole cards are fine; shares are refused before anything is made.
func TestDriverWithoutSMLU(t *testing.T) {
	proc := t.TempDir()
	devices := fmt.Sprintf("Character devices:\n  1 mem\n%d cambricon_ctl\n%d cambricon_dev\n%d cn_rpmsg\n", hardware.CambriconCtlMajor, hardware.CambriconDevMajor, hardware.CambriconIPCMMajor)
	if err := os.WriteFile(filepath.Join(proc, "devices"), []byte(devices), 0o644); err != nil {
		t.Fatal(err)
	}
	tool := newTool(t)
	ctx, b, _ := newBackend(t, tool, t.TempDir(), func(c *Config) { c.ProcRoot = proc })
	if err := b.Validate(ctx, request("c1", whole("mlu-0"), plugin.AllocatedDevice{Device: "mlu-1"})); err != nil {
		t.Errorf("whole cards: %v", err)
	}
	if err := b.Validate(ctx, request("c2", whole("mlu-0"), part("mlu-1", "10", "1Gi"))); err == nil || !strings.Contains(err.Error(), "mlu-1") || !strings.Contains(err.Error(), "cambricon_smlu_cap") {
		t.Errorf("a share: %v, want mlu-1 refused for want of cambricon_smlu_cap", err)
	}
	if _, err := b.Prepare(ctx, request("c1", whole("mlu-0"))); err != nil {
		t.Errorf("prepare of a whole card: %v", err)
	}
}

// The capability node the driver makes with an instance is not listed
// (a kernel that does not show it): the prepare fails and undoes itself.
func TestMissingCapabilityNodeUndoesThePrepare(t *testing.T) {
	tool := newTool(t)
	ctx, b, _ := newBackend(t, tool, t.TempDir(), func(c *Config) { c.DevCharDir = t.TempDir() })
	_, err := b.Prepare(ctx, request("c1", part("mlu-2", "10", "1Gi")))
	if err == nil || !strings.Contains(err.Error(), "cap_dev2_mi1") {
		t.Fatalf("prepare: %v, want the missing capability node named", err)
	}
	if got := tool.instances(t); len(got) != 0 || tool.smluOn(t, 2) {
		t.Errorf("sMLUs %v, card 2 on %v", got, tool.smluOn(t, 2))
	}
	if l := readLedger(t, b); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
		t.Errorf("ledger %+v", l)
	}
}
