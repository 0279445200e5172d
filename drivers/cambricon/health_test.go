package cambricon

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

	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/hardware"
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

// startOn starts a backend over tl on a fresh MLU370-X8 server with its
// ledger in state, returning New's error.
func startOn(t *testing.T, tl Tool, state string) (context.Context, *Backend, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := hardware.WriteMachine(root, hardware.MLU370X8()); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tool: tl, SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir),
		DevRoot: root, StateDir: state, HealthInterval: time.Hour}
	if d, ok := tl.(interface{ devCharDir() string }); ok {
		cfg.DevCharDir = d.devCharDir()
	}
	b, err := New(ctx, cfg)
	return ctx, b, err
}

// A card that does not answer when the plugin starts is left out, with
// the reason, and the other fifteen are served; its sMLUs of claims no
// longer prepared, and its sMLU mode, are kept for a start-up that can
// read the card, which destroys them and switches the mode back.
func TestLostCardAtStartUpIsLeftOut(t *testing.T) {
	tl := newTool(t)
	state := t.TempDir()
	ctx, b, _ := newBackend(t, tl, state)
	if _, err := b.Prepare(ctx, request("c1", part("mlu-9", "50", "4Gi"))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(ctx, request("c2", part("mlu-3", "50", "4Gi"))); err != nil {
		t.Fatal(err)
	}
	if err := tl.mock.Lose(9); err != nil {
		t.Fatal(err)
	}
	ctx, b, err := startOn(t, tl, state)
	if err != nil {
		t.Fatalf("start with a lost card: %v", err)
	}
	if u := b.Unusable(); len(u) != 1 || !strings.Contains(u[0].Error(), "cnmon card 9") || !strings.Contains(u[0].Error(), "does not answer") {
		t.Errorf("unusable cards %v, want card 9, not answering", u)
	}
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if d.Name == "mlu-9" {
			t.Errorf("the lost card is published")
		}
		if len(d.Taints) > 0 {
			t.Errorf("device %s tainted %v", d.Name, d.Taints)
		}
	}
	if len(inv.Devices) != cards-1 {
		t.Errorf("%d devices, want the other %d cards", len(inv.Devices), cards-1)
	}
	// Neither claim is prepared any more: c2's sMLU on card 3 goes, c1's
	// on the lost card stays, and neither fails the reconcile.
	if err := b.Reconcile(ctx, nil); err != nil {
		t.Fatalf("reconcile with an sMLU on the lost card: %v", err)
	}
	if err := tl.mock.Recover(9); err != nil {
		t.Fatal(err)
	}
	if got := tl.instances(t); !slices.Equal(got, []string{"9/1:50p.4096mb"}) || tl.smluOn(t, 3) {
		t.Errorf("sMLUs %v, card 3 on %v; want c1's kept and card 3 off", got, tl.smluOn(t, 3))
	}
	ctx, b, err = startOn(t, tl, state)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := tl.instances(t); len(got) != 0 || tl.smluOn(t, 9) {
		t.Errorf("sMLUs %v, card 9 on %v after a start-up that reads card 9, want none and off", got, tl.smluOn(t, 9))
	}
}

// failingTable is cnmon whose card table fails.
type failingTable struct{ cnmon.Runner }

func (f failingTable) Run(ctx context.Context, args ...string) ([]byte, error) {
	if len(args) == 0 {
		return []byte("cnmon: cndevInit failed\n"), &cnmon.ExitError{Tool: "cnmon", Args: args, Code: 1}
	}
	return f.Runner.Run(ctx, args...)
}

// The plugin does not start when cnmon cannot list the cards, nor when it
// can read none of them.
func TestCnmonThatReadsNoCardFailsStartUp(t *testing.T) {
	tl := newTool(t)
	_, _, err := startOn(t, &cnmon.Client{Runner: failingTable{tl.mock}}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "cnmon cannot list the MLUs") || !strings.Contains(err.Error(), "cndevInit failed") {
		t.Errorf("start with the card table failing: %v", err)
	}
	for card := 0; card < cards; card++ {
		if err := tl.mock.Lose(card); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = startOn(t, tl, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "cnmon can read none of the MLUs") || !strings.Contains(err.Error(), "cnmon card 15") {
		t.Errorf("start with every card lost: %v", err)
	}
}
