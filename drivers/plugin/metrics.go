package plugin

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of Strata's kubelet plugins, served by each plugin binary on
// --metrics-address. Devices are grouped by their "type" attribute in the
// driver's domain (gpu, mig, shared for NVIDIA).
var (
	prepareDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "strata",
		Subsystem:      "kubelet_plugin",
		Name:           "prepare_duration_seconds",
		Help:           "Time to prepare one ResourceClaim, by driver and outcome.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver", "result"})
	unprepareDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "strata",
		Subsystem:      "kubelet_plugin",
		Name:           "unprepare_duration_seconds",
		Help:           "Time to unprepare one ResourceClaim, by driver and outcome.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver", "result"})
	operationErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "strata",
		Subsystem:      "kubelet_plugin",
		Name:           "errors_total",
		Help:           "Failed prepare and unprepare operations, by driver and operation.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver", "operation"})
	overCommitRefused = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "strata",
		Subsystem:      "kubelet_plugin",
		Name:           "overcommit_refused_total",
		Help:           "Prepares refused because the claim's devices, with every claim prepared on the node, would be more than the node has, by driver.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver"})
	publishedDevices = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "strata",
		Subsystem:      "kubelet_plugin",
		Name:           "published_devices",
		Help:           "Devices published in ResourceSlices, by driver, node and device type.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver", "node", "type"})
	deviceUse = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "strata",
		Subsystem:      "kubelet_plugin",
		Name:           "devices",
		Help:           "Published devices that are prepared for a claim (allocated) or not (free), by driver, node and device type. A shared device with any share prepared counts as allocated.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"driver", "node", "type", "state"})
)

var registerMetrics sync.Once

func register() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(prepareDuration, unprepareDuration, operationErrors, overCommitRefused, publishedDevices, deviceUse)
	})
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// deviceType is the device's "type" attribute in its driver's domain.
func deviceType(d resourceapi.Device) string {
	if a, ok := d.Attributes["type"]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return "device"
}

// updateDeviceGaugesLocked recomputes the device gauges from the
// inventory and the prepared claims. It is linear in the devices of one
// node, which is cheap next to a prepare.
func (d *Driver) updateDeviceGaugesLocked() {
	if d.inventory == nil {
		return
	}
	inUse := map[string]bool{}
	for _, c := range d.state.Claims {
		for _, p := range c.Devices {
			inUse[p.Device] = true
		}
	}
	total, allocated := map[string]int{}, map[string]int{}
	for _, dev := range d.inventory.Devices {
		t := deviceType(dev)
		total[t]++
		if inUse[dev.Name] {
			allocated[t]++
		}
	}
	driver, node := d.cfg.DriverName, d.cfg.NodeName
	for t, n := range total {
		publishedDevices.WithLabelValues(driver, node, t).Set(float64(n))
		deviceUse.WithLabelValues(driver, node, t, "allocated").Set(float64(allocated[t]))
		deviceUse.WithLabelValues(driver, node, t, "free").Set(float64(n - allocated[t]))
	}
}
