package plugin

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestProbeSeesAHeldLock: the probe fails before the plugin serves; once
// the watchdog runs it passes; while a call holds the driver's lock the
// time the watchdog last got it stays put, so the probe fails once
// StuckAfter has passed; when the call returns the probe passes again.
func TestProbeSeesAHeldLock(t *testing.T) {
	dir := t.TempDir()
	d := newTestDriver(t, dir, &fakeBackend{devices: gpus("gpu-0")}, "boot-1")
	d.cfg.RollingUpdateUID = "pod-a"
	if err := Probe(dir, "pod-a", time.Now()); err == nil || !strings.Contains(err.Error(), "not serving yet") {
		t.Fatalf("probe before the plugin serves: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.watchLiveness(ctx)
	}()
	defer func() { cancel(); <-done }()
	waitProbe := func(after time.Time) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for Probe(dir, "pod-a", after.Add(StuckAfter)) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("the watchdog did not record the lock free after %s", after)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitProbe(time.Now())

	d.mu.Lock() // a vendor call that does not return
	heldAt := time.Now()
	if err := Probe(dir, "pod-a", heldAt.Add(StuckAfter+time.Second)); err == nil || !strings.Contains(err.Error(), "has held its lock") {
		t.Errorf("probe with the lock held past StuckAfter: %v", err)
	}
	if Probe(dir, "pod-a", heldAt) != nil {
		t.Errorf("probe failed with the lock just taken")
	}
	d.mu.Unlock()
	waitProbe(heldAt.Add(time.Millisecond))
	if other := Probe(dir, "pod-b", time.Now()); other == nil {
		t.Errorf("another pod's probe passed on this pod's file")
	}
}
