package ascend

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/npusmimock"
)

// tool is npu-smi over the fake of an Atlas 800T A2 (eight 910B3).
type tool struct {
	*npusmi.Client
	mock *npusmimock.NPUSMI
}

func newTool(t *testing.T) *tool {
	t.Helper()
	mock, err := npusmimock.New(npusmimock.Model910B3, 8)
	if err != nil {
		t.Fatal(err)
	}
	return &tool{Client: &npusmi.Client{Runner: mock}, mock: mock}
}

// all lists every vNPU as card/id:template.
func (f *tool) all(t *testing.T) []string {
	t.Helper()
	var out []string
	for card := 0; card < 8; card++ {
		info, err := f.VNPUInfo(context.Background(), card, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range info.VNPUs {
			out = append(out, fmt.Sprintf("%d/%d:%s", card, v.ID, v.Template))
		}
	}
	sort.Strings(out)
	return out
}

func newBackend(t *testing.T, tool Tool, stateDir string) (context.Context, *Backend) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := hardware.WriteNode(root, hardware.AtlasA2(), "boot"); err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, Config{Tool: tool, SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir), DevRoot: root, StateDir: stateDir})
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
	_, b := newBackend(t, newTool(t), t.TempDir())
	inv, err := b.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Per chip: whole, 3 × vir05_1c_16g and 1 × vir10_3c_32g: npu-smi
	// gives vNPUs 60 of the chip's 64 GB, which bounds both.
	if len(inv.Devices) != 8*5 || len(inv.SharedCounters) != 8 {
		t.Fatalf("%d devices and %d counter sets, want 40 and 8", len(inv.Devices), len(inv.SharedCounters))
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
	// Card 5 of an Atlas 800T A2 is at 0000:02:00.0, on socket 0's root
	// complex.
	for attr, want := range map[resourceapi.QualifiedName]string{
		"resource.kubernetes.io/pciBusID": "0000:02:00.0", "resource.kubernetes.io/pcieRoot": "pci0000:00",
	} {
		if a := whole.Attributes[attr]; a.StringValue == nil || *a.StringValue != want {
			t.Errorf("npu-5 %s = %v, want %s", attr, a.StringValue, want)
		}
	}
	if a := whole.Attributes["resource.kubernetes.io/numaNode"]; a.IntValue == nil || *a.IntValue != 0 {
		t.Errorf("npu-5 NUMA node %v, want 0", a.IntValue)
	}
	if a := whole.Attributes["accelerator.strata.sh/whole"]; a.BoolValue == nil || !*a.BoolValue {
		t.Errorf("npu-5 is not whole")
	}
	if a := whole.Attributes["accelerator.strata.sh/memory"]; a.IntValue == nil || *a.IntValue != 64<<30 {
		t.Errorf("npu-5 memory %v", a.IntValue)
	}
	if _, ok := byName["npu-5-vir10-3c-32g-1"]; ok {
		t.Errorf("a second vir10_3c_32g slot on a chip with 60 GB for vNPUs")
	}
	v := byName["npu-5-vir10-3c-32g-0"]
	if v.Name == "" || *v.Attributes["template"].StringValue != "vir10_3c_32g" || *v.Attributes["accelerator.strata.sh/whole"].BoolValue {
		t.Fatalf("vNPU slot npu-5-vir10-3c-32g-0: %+v", v)
	}
	if _, ok := v.Attributes["accelerator.strata.sh/partition4"]; ok {
		t.Errorf("a vNPU carries HCCS groups")
	}
	// The whole chip consumes every counter; a vNPU its template's.
	cores := func(d resourceapi.Device) int64 {
		c := d.ConsumesCounters[0].Counters[counterCores]
		return c.Value.Value()
	}
	if cores(whole) != 20 || cores(v) != 10 || v.ConsumesCounters[0].CounterSet != "npu-5" {
		t.Errorf("counters: whole %d, vir10 %d on %s", cores(whole), cores(v), v.ConsumesCounters[0].CounterSet)
	}
}

func TestVNPUCreatedOnPrepareAndDestroyedOnUnprepare(t *testing.T) {
	tool := newTool(t)
	state := t.TempDir()
	ctx, b := newBackend(t, tool, state)
	resp, err := b.Prepare(ctx, request("c1", "npu-2-vir05-1c-16g-0", "npu-2-vir10-3c-32g-0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tool.all(t); !slices.Equal(got, []string{"2/132:vir05_1c_16g", "2/133:vir10_3c_32g"}) {
		t.Fatalf("vNPUs %v, want ids 132 and 133 on card 2", got)
	}
	if n := resp.Devices[0].Edits.DeviceNodes[0]; n.Path != "/dev/vdavinci132" || n.Major != 236 || n.Minor != 132 {
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
	if got := tool.all(t); len(got) != 0 {
		t.Errorf("after unprepare: %v", got)
	}
}

func TestWholeChipPrepare(t *testing.T) {
	tool := newTool(t)
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
	if len(tool.all(t)) != 0 {
		t.Errorf("a whole-chip claim made vNPUs: %v", tool.all(t))
	}
}

// A plugin that stopped after npu-smi made a vNPU and before the
// checkpoint recorded it: the new instance finds it in the ledger.
func TestInterruptedPrepareIsCleanedUp(t *testing.T) {
	tool := newTool(t)
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
	if got := tool.all(t); !slices.Equal(got, []string{"7/212:vir10_3c_32g"}) {
		t.Errorf("vNPUs %v, want only the operator's", got)
	}
	// Reconcile: a ledger entry whose claim is no longer prepared goes.
	if _, err := restarted.Prepare(ctx, request("c2", "npu-4-vir05-1c-16g-1")); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := tool.all(t); !slices.Equal(got, []string{"7/212:vir10_3c_32g"}) {
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
	tool := newTool(t)
	state := t.TempDir()
	ctx, b := newBackend(t, tool, state)
	if _, err := b.Prepare(ctx, request("c1", "npu-1-vir05-1c-16g-0")); err != nil {
		t.Fatal(err)
	}
	// An operator's vNPU takes 5 of chip 6's 20 AI cores; a claim for a
	// vir05 and a vir10 there gets the first and is refused the second
	// by npu-smi (the scheduler would not have allocated it; prepare must
	// still undo what it did).
	if _, err := tool.CreateVNPU(ctx, 6, 0, "vir05_1c_16g", 200); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.CreateVNPU(ctx, 6, 0, "vir05_1c_16g", 201); err != nil {
		t.Fatal(err)
	}
	_, err := b.Prepare(ctx, request("c2", "npu-6-vir05-1c-16g-0", "npu-6-vir10-3c-32g-0"))
	if err == nil {
		t.Fatal("prepare succeeded")
	}
	if got := tool.all(t); !slices.Equal(got, []string{"1/116:vir05_1c_16g", "6/200:vir05_1c_16g", "6/201:vir05_1c_16g"}) {
		t.Errorf("vNPUs %v, want c1's and the operator's only", got)
	}
	l, err := b.ledger.Load()
	if err != nil || len(l.Instances) != 1 || l.Instances[0].Claim != "c1" {
		t.Errorf("ledger %+v (%v), want c1's entry only", l, err)
	}
}

// lateTool is npu-smi that makes a vNPU and then reports a failure, as
// one killed at its deadline after the driver made it does; with
// destroyFails, destroying fails too.
type lateTool struct {
	*tool
	destroyFails bool
}

func (l *lateTool) CreateVNPU(ctx context.Context, card, chip int, template string, id int) (npusmi.VNPU, error) {
	if _, err := l.tool.CreateVNPU(ctx, card, chip, template, id); err != nil {
		return npusmi.VNPU{}, err
	}
	return npusmi.VNPU{}, fmt.Errorf("npu-smi set -t create-vnpu -i %d -c %d: no answer within 30s, killed", card, chip)
}

func (l *lateTool) DestroyVNPU(ctx context.Context, card, chip, id int) error {
	if l.destroyFails {
		return fmt.Errorf("npu-smi set -t destroy-vnpu -i %d -c %d -v %d: no answer within 30s, killed", card, chip, id)
	}
	return l.tool.DestroyVNPU(ctx, card, chip, id)
}

// A create that npu-smi reports failed after making the vNPU is rolled
// back like one that succeeded: the failed prepare destroys it, or, where
// that fails too, its ledger entry stays for a later unprepare or
// reconcile to destroy it. It never becomes a vNPU nobody owns.
func TestVNPUMadeByAFailedCreateIsDestroyed(t *testing.T) {
	for name, destroyFails := range map[string]bool{"by the failed prepare": false, "by a later reconcile": true} {
		t.Run(name, func(t *testing.T) {
			tl := &lateTool{tool: newTool(t), destroyFails: destroyFails}
			ctx, b := newBackend(t, tl, t.TempDir())
			if _, err := b.Prepare(ctx, request("c1", "npu-3-vir05-1c-16g-0")); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("prepare: %v, want npu-smi's failure", err)
			}
			l, err := b.ledger.Load()
			if err != nil {
				t.Fatal(err)
			}
			if destroyFails {
				if got := tl.all(t); !slices.Equal(got, []string{"3/148:vir05_1c_16g"}) {
					t.Fatalf("vNPUs %v, want the one npu-smi made", got)
				}
				if len(l.Instances) != 1 || l.Instances[0].Claim != "c1" || l.Instances[0].ID != 148 {
					t.Fatalf("ledger %+v, want c1's vNPU 148 kept", l.Instances)
				}
				tl.destroyFails = false
				if err := b.Reconcile(ctx, nil); err != nil {
					t.Fatal(err)
				}
				if l, err = b.ledger.Load(); err != nil {
					t.Fatal(err)
				}
			}
			if got := tl.all(t); len(got) != 0 {
				t.Errorf("vNPUs %v left", got)
			}
			if len(l.Instances) != 0 {
				t.Errorf("ledger %+v, want empty", l.Instances)
			}
		})
	}
}

func TestDriverMountsFollowTheConfig(t *testing.T) {
	tool := newTool(t)
	ctx, b := newBackend(t, tool, t.TempDir())
	b.cfg.DriverRoot, b.cfg.NPUSMI, b.cfg.DCMIDir = "/usr/local/Ascend/driver", "/usr/local/bin/npu-smi", "/usr/local/dcmi"
	h := b.ConfigHandler()
	effective := func(raws ...string) any {
		var decoded []any
		for _, raw := range raws {
			v, err := h.Decode([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			decoded = append(decoded, v)
		}
		cfg, err := h.Effective(decoded)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const none = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","driver":"None"}`
	const mount = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","driver":"Mount"}`
	for name, tc := range map[string]struct {
		config any
		mounts []string
	}{
		"default":                 {effective(), []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/include", "/usr/local/dcmi", "/usr/local/bin/npu-smi"}},
		"none":                    {effective(none), nil},
		"class none, claim mount": {effective(none, mount), []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/include", "/usr/local/dcmi", "/usr/local/bin/npu-smi"}},
	} {
		t.Run(name, func(t *testing.T) {
			req := request("c-"+strings.ReplaceAll(name, " ", "-"), "npu-6")
			req.Devices[0].Config = tc.config
			resp, err := b.Prepare(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range resp.Common.Mounts {
				if m.HostPath != m.ContainerPath || !slices.Contains(m.Options, "ro") {
					t.Errorf("mount %+v is not read-only at the host path", m)
				}
				got = append(got, m.ContainerPath)
			}
			if !slices.Equal(got, tc.mounts) {
				t.Errorf("mounts %v, want %v", got, tc.mounts)
			}
		})
	}
	if _, err := h.Decode([]byte(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","driver":"Copy"}`)); err == nil || !strings.Contains(err.Error(), "driver: Unsupported value") {
		t.Errorf("bad driver mode: %v", err)
	}
}
