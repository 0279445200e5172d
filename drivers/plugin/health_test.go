package plugin

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
)

// TestWatchHealthStatusFollowsTaints: the kubelet gets every device's
// health at once, Unhealthy with the taints as message where the backend
// tainted a device, and a new report as soon as the devices are
// published again with other taints.
func TestWatchHealthStatusFollowsTaints(t *testing.T) {
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	defer cancel()
	backend := &fakeBackend{devices: gpus("gpu-0", "gpu-1")}
	backend.devices[1].Taints = []resourceapi.DeviceTaint{{Key: "gpu.example.com/xid", Value: "48", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	d := newTestDriver(t, t.TempDir(), backend, "boot")
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()

	want := func(gpu0, gpu1 kubeletplugin.HealthStatus, msg1 string) {
		t.Helper()
		select {
		case r := <-reports:
			got := map[string]kubeletplugin.DeviceHealth{}
			for _, h := range r.Devices {
				got[h.DeviceName] = h
			}
			if got["gpu-0"].Health != gpu0 || got["gpu-1"].Health != gpu1 || got["gpu-1"].Message != msg1 {
				t.Errorf("report %+v, want gpu-0 %s, gpu-1 %s %q", r.Devices, gpu0, gpu1, msg1)
			}
			if h := got["gpu-0"]; h.PoolName != t.Name() || h.HealthCheckTimeout != HealthCheckTimeout {
				t.Errorf("gpu-0 pool %q timeout %v", h.PoolName, h.HealthCheckTimeout)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no health report")
		}
	}
	want(kubeletplugin.HealthStatusHealthy, kubeletplugin.HealthStatusUnhealthy, "gpu.example.com/xid=48:NoSchedule")

	// The GPU recovers: the next publish wakes the watcher at once.
	backend.devices[1].Taints = nil
	if err := d.refreshInventory(ctx); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.notifyPublishedLocked()
	d.mu.Unlock()
	want(kubeletplugin.HealthStatusHealthy, kubeletplugin.HealthStatusHealthy, "")

	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus returned %v after cancel", err)
	}
}
