package ascend

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/hardware"
)

// healthBackend is a backend over the fake with health polled every
// interval.
func healthBackend(t *testing.T, tl *tool, interval time.Duration) (context.Context, *Backend) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := hardware.WriteNode(root, hardware.AtlasA2(), "boot"); err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, Config{Tool: tl, SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir),
		DevRoot: root, StateDir: t.TempDir(), HealthInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, b
}

// taints lists the published devices' taints as device=key=value:effect.
func taints(t *testing.T, ctx context.Context, b *Backend) []string {
	t.Helper()
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	var out []string
	for _, d := range inv.Devices {
		for _, tt := range d.Taints {
			out = append(out, d.Name+"="+tt.Key+"="+tt.Value+":"+string(tt.Effect))
		}
	}
	return out
}

func chipTaints(name, value string) []string {
	var out []string
	for _, d := range []string{name, name + "-vir10-3c-32g-0", name + "-vir05-1c-16g-0", name + "-vir05-1c-16g-1", name + "-vir05-1c-16g-2"} {
		out = append(out, d+"="+TaintUnhealthy+"="+value+":"+string(resourceapi.DeviceTaintEffectNoSchedule))
	}
	return out
}

// A chip npu-smi reports in Alarm is tainted with its devices, the rest
// are not; it recovers when npu-smi reports it OK again. A Warning taints
// nothing.
func TestUnhealthyChipIsTaintedUntilItRecovers(t *testing.T) {
	tl := newTool(t)
	ctx, b := healthBackend(t, tl, time.Hour)
	if got := taints(t, ctx, b); len(got) != 0 {
		t.Fatalf("healthy node published taints %v", got)
	}
	if err := tl.mock.Fault(2, "Warning", "80E01801"); err != nil {
		t.Fatal(err)
	}
	if b.probeHealth(ctx) {
		t.Error("a Warning changed the chip's health")
	}
	if err := tl.mock.Fault(2, "Alarm", "80E01801"); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("an Alarm was not a change")
	}
	if diff := cmp.Diff(chipTaints("npu-2", "Alarm-80E01801"), taints(t, ctx, b)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if b.probeHealth(ctx) {
		t.Error("the same Alarm again was a change")
	}
	if err := tl.mock.Recover(2); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("recovery was not a change")
	}
	if got := taints(t, ctx, b); len(got) != 0 {
		t.Errorf("recovered node published taints %v", got)
	}
}

// A chip npu-smi cannot query at all is tainted ToolError alone: the
// other chips keep serving with their counters, and the chip comes back
// untainted once npu-smi answers again.
func TestUnreadableChipIsTaintedAlone(t *testing.T) {
	tl := newTool(t)
	ctx, b := healthBackend(t, tl, time.Hour)
	before, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.mock.Lose(5); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("a lost chip was not a change")
	}
	after, err := b.Discover(ctx)
	if err != nil {
		t.Fatalf("one lost chip failed the node's discovery: %v", err)
	}
	if len(after.Devices) != len(before.Devices) {
		t.Errorf("%d devices published, %d before", len(after.Devices), len(before.Devices))
	}
	if diff := cmp.Diff(chipTaints("npu-5", "ToolError"), taints(t, ctx, b)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before.SharedCounters, after.SharedCounters); diff != "" {
		t.Errorf("counters changed (-before +after):\n%s", diff)
	}
	if !b.discoverFailed() {
		t.Error("the failed read is not retried")
	}
	if err := tl.mock.Recover(5); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("recovery was not a change")
	}
	if got := taints(t, ctx, b); len(got) != 0 {
		t.Errorf("recovered node published taints %v", got)
	}
	if b.discoverFailed() {
		t.Error("a read that succeeded still counts as failed")
	}
}

// The plugin's first publish already taints a chip that was unhealthy
// at start-up, and WatchHealth notices a change within its interval.
func TestWatchHealth(t *testing.T) {
	tl := newTool(t)
	if err := tl.mock.Fault(1, "Critical", "80CB8009"); err != nil {
		t.Fatal(err)
	}
	ctx, b := healthBackend(t, tl, 10*time.Millisecond)
	if diff := cmp.Diff(chipTaints("npu-1", "Critical-80CB8009"), taints(t, ctx, b)); diff != "" {
		t.Errorf("first publish (-want +got):\n%s", diff)
	}
	watchCtx, cancel := context.WithCancel(ctx)
	changed := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.WatchHealth(watchCtx, func() { changed <- struct{}{} })
	}()
	if err := tl.mock.Recover(1); err != nil {
		t.Fatal(err)
	}
	<-changed
	cancel()
	<-done
	if got := taints(t, ctx, b); len(got) != 0 {
		t.Errorf("taints %v after recovery", got)
	}
}

// startOn starts a backend over tl on a fresh Atlas 800T A2 with its
// ledger in state, returning New's error.
func startOn(t *testing.T, tl Tool, state string) (context.Context, *Backend, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := hardware.WriteNode(root, hardware.AtlasA2(), "boot"); err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, Config{Tool: tl, SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir),
		DevRoot: root, StateDir: state, HealthInterval: time.Hour})
	return ctx, b, err
}

// A chip that does not answer when the plugin starts is left out, with
// the reason, and the other seven are served; its vNPUs of claims no
// longer prepared are kept for a start-up that can read the chip, which
// destroys them.
func TestLostNPUAtStartUpIsLeftOut(t *testing.T) {
	tl := newTool(t)
	state := t.TempDir()
	ctx, b := newBackend(t, tl, state)
	if _, err := b.Prepare(ctx, request("c1", "npu-5-vir05-1c-16g-0")); err != nil {
		t.Fatal(err)
	}
	if err := tl.mock.Lose(5); err != nil {
		t.Fatal(err)
	}
	ctx, b, err := startOn(t, tl, state)
	if err != nil {
		t.Fatalf("start with a lost NPU: %v", err)
	}
	if u := b.Unusable(); len(u) != 1 || !strings.Contains(u[0].Error(), "NPU 5 chip 0") || !strings.Contains(u[0].Error(), "does not answer") {
		t.Errorf("unusable NPUs %v, want NPU 5, not answering", u)
	}
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if d.Name == "npu-5" || strings.HasPrefix(d.Name, "npu-5-") {
			t.Errorf("the lost NPU's device %s is published", d.Name)
		}
		if len(d.Taints) > 0 {
			t.Errorf("device %s tainted %v", d.Name, d.Taints)
		}
	}
	if len(inv.Devices) != 7*5 || len(inv.SharedCounters) != 7 {
		t.Errorf("%d devices and %d counter sets, want the other seven NPUs' 35 and 7", len(inv.Devices), len(inv.SharedCounters))
	}
	if err := b.Reconcile(ctx, nil); err != nil {
		t.Fatalf("reconcile with a vNPU on the lost NPU: %v", err)
	}
	if err := tl.mock.Recover(5); err != nil {
		t.Fatal(err)
	}
	if got := tl.all(t); !slices.Equal(got, []string{"5/180:vir05_1c_16g"}) {
		t.Errorf("vNPUs %v, want c1's kept", got)
	}
	ctx, b, err = startOn(t, tl, state)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := tl.all(t); len(got) != 0 {
		t.Errorf("vNPUs %v after a start-up that reads NPU 5, want c1's destroyed", got)
	}
}

// failingList is npu-smi whose info -m fails.
type failingList struct{ npusmi.Runner }

func (f failingList) Run(ctx context.Context, args ...string) ([]byte, error) {
	if strings.Join(args, " ") == "info -m" {
		return []byte("dcmi module initialize failed. ret is -8005\n"), &npusmi.ExitError{Tool: "npu-smi", Args: args, Code: 1}
	}
	return f.Runner.Run(ctx, args...)
}

// The plugin does not start when npu-smi cannot list the chips, nor when
// it can read none of them.
func TestNPUSMIThatReadsNoNPUFailsStartUp(t *testing.T) {
	tl := newTool(t)
	_, _, err := startOn(t, &npusmi.Client{Runner: failingList{tl.mock}}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "npu-smi cannot list the NPUs") || !strings.Contains(err.Error(), "info -m") {
		t.Errorf("start with info -m failing: %v", err)
	}
	for card := 0; card < 8; card++ {
		if err := tl.mock.Lose(card); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = startOn(t, tl, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "npu-smi can read none of the NPUs") || !strings.Contains(err.Error(), "NPU 7 chip 0") {
		t.Errorf("start with every NPU lost: %v", err)
	}
}
