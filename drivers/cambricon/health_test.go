package cambricon

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/strata-sh/strata/hardware/cnmonmock"
)

// cardTaints lists the published cards' taints as card=key=value:effect.
func cardTaints(t *testing.T, ctx context.Context, b *Backend) []string {
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

func unhealthy(card, value string) []string {
	return []string{card + "=" + TaintUnhealthy + "=" + value + ":" + string(resourceapi.DeviceTaintEffectNoSchedule)}
}

func withHealth(interval time.Duration) func(*Config) {
	return func(c *Config) { c.HealthInterval = interval }
}

// A card whose Health State is not Good is tainted alone and recovers
// when cnmon reports it Good again.
func TestFaultyCardIsTaintedUntilItRecovers(t *testing.T) {
	tl := newTool(t)
	ctx, b, _ := newBackend(t, tl, t.TempDir(), withHealth(time.Hour))
	if got := cardTaints(t, ctx, b); len(got) != 0 {
		t.Fatalf("healthy node published taints %v", got)
	}
	if err := tl.mock.Fault(4, cnmonmock.DeviceFaulty, ""); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("a faulty card was not a change")
	}
	if diff := cmp.Diff(unhealthy("mlu-4", "Device-Bad"), cardTaints(t, ctx, b)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if b.probeHealth(ctx) {
		t.Error("the same fault again was a change")
	}
	if err := tl.mock.Recover(4); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("recovery was not a change")
	}
	if got := cardTaints(t, ctx, b); len(got) != 0 {
		t.Errorf("recovered node published taints %v", got)
	}
}

// A card cnmon cannot query is tainted ToolError alone; the others keep
// serving, and it comes back untainted once cnmon answers again.
func TestUnreadableCardIsTaintedAlone(t *testing.T) {
	tl := newTool(t)
	ctx, b, _ := newBackend(t, tl, t.TempDir(), withHealth(time.Hour))
	before, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.mock.Lose(9); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("a lost card was not a change")
	}
	after, err := b.Discover(ctx)
	if err != nil {
		t.Fatalf("one lost card failed the node's discovery: %v", err)
	}
	if len(after.Devices) != len(before.Devices) {
		t.Errorf("%d devices published, %d before", len(after.Devices), len(before.Devices))
	}
	if diff := cmp.Diff(unhealthy("mlu-9", "ToolError"), cardTaints(t, ctx, b)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if !b.discoverFailed() {
		t.Error("the failed read is not retried")
	}
	if err := tl.mock.Recover(9); err != nil {
		t.Fatal(err)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("recovery was not a change")
	}
	if got := cardTaints(t, ctx, b); len(got) != 0 {
		t.Errorf("recovered node published taints %v", got)
	}
	if b.discoverFailed() {
		t.Error("a read that succeeded still counts as failed")
	}
}

// The first publish already taints a card that was faulty at start-up,
// and WatchHealth notices a change within its interval.
func TestWatchHealth(t *testing.T) {
	tl := newTool(t)
	if err := tl.mock.Fault(0, "Good", "Stopped"); err != nil {
		t.Fatal(err)
	}
	ctx, b, _ := newBackend(t, tl, t.TempDir(), withHealth(10*time.Millisecond))
	if diff := cmp.Diff(unhealthy("mlu-0", "Driver-Stopped"), cardTaints(t, ctx, b)); diff != "" {
		t.Errorf("first publish (-want +got):\n%s", diff)
	}
	watchCtx, cancel := context.WithCancel(ctx)
	changed := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.WatchHealth(watchCtx, func() { changed <- struct{}{} })
	}()
	if err := tl.mock.Recover(0); err != nil {
		t.Fatal(err)
	}
	<-changed
	cancel()
	<-done
	if got := cardTaints(t, ctx, b); len(got) != 0 {
		t.Errorf("taints %v after recovery", got)
	}
}
