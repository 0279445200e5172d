package ascend

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

	"github.com/strata-sh/strata/drivers/plugin"
)

// fakeTool is npu-smi on eight 910B3 chips, refusing what the real tool
// refuses: an unknown template, more than a chip holds, an id in use.
type fakeTool struct {
	chips     []Chip
	templates []Template
	vnpus     map[int][]VNPU // by card
	failNext  bool
}

func newFakeTool() *fakeTool {
	f := &fakeTool{vnpus: map[int][]VNPU{}, templates: []Template{
		{Name: "vir05_1c_16g", AICores: 5, AICPU: 1, MemoryMB: 16384},
		{Name: "vir10_3c_32g", AICores: 10, AICPU: 3, MemoryMB: 32768},
	}}
	for i := 0; i < 8; i++ {
		f.chips = append(f.chips, Chip{Card: i, ChipID: 0, LogicID: i, PhyID: i, Name: "910B3", MemoryMB: 65536, AICores: 20})
	}
	return f
}

func (f *fakeTool) Chips(context.Context) ([]Chip, error) { return f.chips, nil }
func (f *fakeTool) Templates(context.Context, int, int) ([]Template, error) {
	return f.templates, nil
}
func (f *fakeTool) VNPUs(_ context.Context, card, _ int) ([]VNPU, error) {
	return slices.Clone(f.vnpus[card]), nil
}

func (f *fakeTool) CreateVNPU(_ context.Context, card, _ int, template string, id int) (VNPU, error) {
	if f.failNext {
		f.failNext = false
		return VNPU{}, fmt.Errorf("create vnpu failed")
	}
	var tpl *Template
	for i := range f.templates {
		if f.templates[i].Name == template {
			tpl = &f.templates[i]
		}
	}
	if tpl == nil {
		return VNPU{}, fmt.Errorf("template %s is not supported", template)
	}
	cores := tpl.AICores
	for _, v := range f.vnpus[card] {
		if v.ID == id {
			return VNPU{}, fmt.Errorf("vnpu id %d is in use", id)
		}
		for _, t := range f.templates {
			if t.Name == v.Template {
				cores += t.AICores
			}
		}
	}
	if cores > f.chips[card].AICores {
		return VNPU{}, fmt.Errorf("not enough AI cores")
	}
	v := VNPU{ID: id, Template: template}
	f.vnpus[card] = append(f.vnpus[card], v)
	return v, nil
}

func (f *fakeTool) DestroyVNPU(_ context.Context, card, _ int, id int) error {
	for i, v := range f.vnpus[card] {
		if v.ID == id {
			f.vnpus[card] = slices.Delete(f.vnpus[card], i, i+1)
			return nil
		}
	}
	return fmt.Errorf("vnpu %d does not exist", id)
}

func (f *fakeTool) all() []string {
	var out []string
	for card, vs := range f.vnpus {
		for _, v := range vs {
			out = append(out, fmt.Sprintf("%d/%d:%s", card, v.ID, v.Template))
		}
	}
	sort.Strings(out)
	return out
}

const procDevices = "Character devices:\n  1 mem\n236 devdrv-cdev\n237 vdevdrv-cdev\n238 davinci_manager\n239 devmm_svm\n240 hisi_hdc\n"

func newBackend(t *testing.T, tool *fakeTool, stateDir string) (context.Context, *Backend) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "devices"), []byte(procDevices), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, Config{Tool: tool, SysfsRoot: filepath.Join(root, "sys"), ProcRoot: filepath.Join(root, "proc"), DevRoot: root, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, b
}

func request(uid string, devices ...string) *plugin.PrepareRequest {
	req := &plugin.PrepareRequest{Claim: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)}}}
	for _, d := range devices {
		req.Devices = append(req.Devices, plugin.AllocatedDevice{Request: "npu", Pool: "node", Device: d})
	}
	return req
}

func TestDiscoverPublishesChipsAndTemplateSlots(t *testing.T) {
	_, b := newBackend(t, newFakeTool(), t.TempDir())
	inv, err := b.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Per chip: whole, 4 × vir05 (20 cores / 5), 2 × vir10.
	if len(inv.Devices) != 8*7 || len(inv.SharedCounters) != 8 {
		t.Fatalf("%d devices and %d counter sets, want 56 and 8", len(inv.Devices), len(inv.SharedCounters))
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range inv.Devices {
		byName[d.Name] = d
	}
	whole := byName["npu-5"]
	for attr, want := range map[resourceapi.QualifiedName]string{
		"type": "npu", "chipName": "910B3", "accelerator.strata.sh/type": "npu", "accelerator.strata.sh/vendor": "huawei",
		"accelerator.strata.sh/model": "910B", "accelerator.strata.sh/partition4": "hccs-half-1", "accelerator.strata.sh/partition2": "hccs-pair-2",
		"accelerator.strata.sh/partition8": "hccs-all",
	} {
		if a := whole.Attributes[attr]; a.StringValue == nil || *a.StringValue != want {
			t.Errorf("npu-5 %s = %v, want %s", attr, a.StringValue, want)
		}
	}
	if a := whole.Attributes["accelerator.strata.sh/whole"]; a.BoolValue == nil || !*a.BoolValue {
		t.Errorf("npu-5 is not whole")
	}
	if a := whole.Attributes["accelerator.strata.sh/memory"]; a.IntValue == nil || *a.IntValue != 64<<30 {
		t.Errorf("npu-5 memory %v", a.IntValue)
	}
	v := byName["npu-5-vir10-3c-32g-1"]
	if v.Name == "" || *v.Attributes["template"].StringValue != "vir10_3c_32g" || *v.Attributes["accelerator.strata.sh/whole"].BoolValue {
		t.Fatalf("vNPU slot npu-5-vir10-3c-32g-1: %+v", v)
	}
	if _, ok := v.Attributes["accelerator.strata.sh/partition4"]; ok {
		t.Errorf("a vNPU carries HCCS groups")
	}
	// The whole chip consumes every counter; a vNPU its template's.
	cores := func(d resourceapi.Device) int64 { c := d.ConsumesCounters[0].Counters[counterCores]; return c.Value.Value() }
	if cores(whole) != 20 || cores(v) != 10 || v.ConsumesCounters[0].CounterSet != "npu-5" {
		t.Errorf("counters: whole %d, vir10 %d on %s", cores(whole), cores(v), v.ConsumesCounters[0].CounterSet)
	}
}

func TestVNPUCreatedOnPrepareAndDestroyedOnUnprepare(t *testing.T) {
	tool := newFakeTool()
	state := t.TempDir()
	ctx, b := newBackend(t, tool, state)
	resp, err := b.Prepare(ctx, request("c1", "npu-2-vir05-1c-16g-0", "npu-2-vir10-3c-32g-0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tool.all(); !slices.Equal(got, []string{"2/132:vir05_1c_16g", "2/133:vir10_3c_32g"}) {
		t.Fatalf("vNPUs %v, want ids 132 and 133 on card 2", got)
	}
	if n := resp.Devices[0].Edits.DeviceNodes[0]; n.Path != "/dev/vdavinci132" || n.Major != 237 || n.Minor != 132 {
		t.Errorf("device node %+v", n)
	}
	env := strings.Join(resp.Common.Env, " ")
	if env != "ASCEND_VISIBLE_DEVICES=132,133 ASCEND_RUNTIME_OPTIONS=VIRTUAL" {
		t.Errorf("env %q", env)
	}
	var st vnpu
	if err := json.Unmarshal(resp.Devices[1].State, &st); err != nil || st.ID != 133 {
		t.Errorf("state %s: %v", resp.Devices[1].State, err)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "c1"}, resp.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tool.all(); len(got) != 0 {
		t.Errorf("after unprepare: %v", got)
	}
}

func TestWholeChipPrepare(t *testing.T) {
	tool := newFakeTool()
	ctx, b := newBackend(t, tool, t.TempDir())
	resp, err := b.Prepare(ctx, request("c1", "npu-3", "npu-1"))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, d := range resp.Devices {
		for _, n := range d.Edits.DeviceNodes {
			nodes = append(nodes, fmt.Sprintf("%s %d:%d", n.Path, n.Major, n.Minor))
		}
	}
	for _, n := range resp.Common.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	want := []string{"/dev/davinci3 236:3", "/dev/davinci1 236:1", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"}
	if !slices.Equal(nodes, want) || !slices.Equal(resp.Common.Env, []string{"ASCEND_VISIBLE_DEVICES=1,3"}) {
		t.Errorf("nodes %v env %v", nodes, resp.Common.Env)
	}
	if len(tool.all()) != 0 {
		t.Errorf("a whole-chip claim made vNPUs: %v", tool.all())
	}
}

// A plugin that stopped after npu-smi made a vNPU and before the
// checkpoint recorded it: the new instance finds it in the ledger.
func TestInterruptedPrepareIsCleanedUp(t *testing.T) {
	tool := newFakeTool()
	state := t.TempDir()
	ctx, b := newBackend(t, tool, state)
	if _, err := b.Prepare(ctx, request("c1", "npu-0-vir05-1c-16g-0")); err != nil {
		t.Fatal(err)
	}
	// An operator's vNPU on another chip is not the plugin's.
	if _, err := tool.CreateVNPU(ctx, 7, 0, "vir10_3c_32g", 212); err != nil {
		t.Fatal(err)
	}
	_, restarted := newBackend(t, tool, state)
	// Unprepare with identities only (the checkpoint's PrepareStarted).
	if err := restarted.Unprepare(ctx, plugin.ClaimRef{UID: "c1"}, []plugin.PreparedDevice{{Device: "npu-0-vir05-1c-16g-0"}}); err != nil {
		t.Fatal(err)
	}
	if got := tool.all(); !slices.Equal(got, []string{"7/212:vir10_3c_32g"}) {
		t.Errorf("vNPUs %v, want only the operator's", got)
	}
	// Reconcile: a ledger entry whose claim is no longer prepared goes.
	if _, err := restarted.Prepare(ctx, request("c2", "npu-4-vir05-1c-16g-1")); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := tool.all(); !slices.Equal(got, []string{"7/212:vir10_3c_32g"}) {
		t.Errorf("after reconcile: %v", got)
	}
	// The operator's vNPU holds its share of chip 7.
	inv, err := restarted.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range inv.SharedCounters {
		if cs.Name == "npu-7" {
			if c := cs.Counters[counterCores]; c.Value.Value() != 10 {
				t.Errorf("npu-7 offers %d AI cores beside the operator's vNPU, want 10", c.Value.Value())
			}
		}
	}
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	tool := newFakeTool()
	state := t.TempDir()
	ctx, b := newBackend(t, tool, state)
	if _, err := b.Prepare(ctx, request("c1", "npu-1-vir05-1c-16g-0")); err != nil {
		t.Fatal(err)
	}
	tool.failNext = false
	// The second vNPU of a claim fails: the first one it made goes too.
	tool.vnpus[6] = nil
	tool.failNext = false
	req := request("c2", "npu-6-vir05-1c-16g-0", "npu-6-vir10-3c-32g-0")
	tool2 := tool
	orig := tool2.templates
	tool2.templates = orig[:1] // vir10 now unknown to the tool
	if _, err := b.Prepare(ctx, req); err == nil {
		t.Fatal("prepare succeeded")
	}
	tool2.templates = orig
	if got := tool.all(); !slices.Equal(got, []string{"1/116:vir05_1c_16g"}) {
		t.Errorf("vNPUs %v, want only c1's", got)
	}
	ledger, err := b.readLedger()
	if err != nil || len(ledger) != 1 || ledger[0].Claim != "c1" {
		t.Errorf("ledger %+v (%v), want c1's entry only", ledger, err)
	}
}
