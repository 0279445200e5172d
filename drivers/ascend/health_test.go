package ascend

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

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
