package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Device health reaches the kubelet from the same signal as the device
// taints in the published slices: a device that its backend taints is
// unhealthy, every other published device is healthy. One signal, two
// consumers: the scheduler avoids a tainted device, and the kubelet shows
// the health of the devices a pod holds in the pod's status
// (containerStatuses[].allocatedResourcesStatus).

// HealthResendInterval is how often the full report is sent again when
// nothing changed, so the kubelet never lets a device decay to Unknown:
// it does so after HealthCheckTimeout without a report.
const (
	HealthResendInterval = 10 * time.Second
	HealthCheckTimeout   = 30 * time.Second
)

// WatchHealthStatus implements kubeletplugin.DRAPlugin. It sends the
// health of every published device at once, again after every
// republish (a health change), and every HealthResendInterval.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	ticker := time.NewTicker(HealthResendInterval)
	defer ticker.Stop()
	for {
		changed := d.healthChanged()
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.healthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C:
		}
	}
}

// healthChanged returns a channel that is closed at the next publish.
func (d *Driver) healthChanged() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.published == nil {
		d.published = make(chan struct{})
	}
	return d.published
}

// notifyPublishedLocked wakes every health watcher.
func (d *Driver) notifyPublishedLocked() {
	if d.published != nil {
		close(d.published)
		d.published = nil
	}
}

// healthReport describes every device of the current inventory.
func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	report := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(d.inventory.Devices))}
	for _, dev := range d.inventory.Devices {
		h := kubeletplugin.DeviceHealth{
			PoolName:           d.cfg.NodeName,
			DeviceName:         dev.Name,
			Health:             kubeletplugin.HealthStatusHealthy,
			LastUpdated:        now,
			HealthCheckTimeout: HealthCheckTimeout,
		}
		if len(dev.Taints) > 0 {
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = taintsMessage(dev.Taints)
		}
		report.Devices = append(report.Devices, h)
	}
	return report
}

// taintsMessage renders a device's taints as "key=value:Effect, ...".
func taintsMessage(taints []resourceapi.DeviceTaint) string {
	parts := make([]string, 0, len(taints))
	for _, t := range taints {
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		parts = append(parts, fmt.Sprintf("%s:%s", s, t.Effect))
	}
	return strings.Join(parts, ", ")
}
