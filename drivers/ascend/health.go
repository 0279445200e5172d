package ascend

import (
	"context"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// TaintUnhealthy is the taint on every device of a chip that npu-smi
// reports unhealthy (Health Status Alarm or Critical) or that npu-smi
// cannot query. Its value is the reason: the state and its fault codes
// ("Alarm-80E01801"), cut to a label value's 63 characters, or
// ToolError.
const TaintUnhealthy = DriverName + "/unhealthy"

// DefaultHealthInterval is how often the app polls the chips' health:
// one npu-smi run per chip each time.
const DefaultHealthInterval = 30 * time.Second

var _ plugin.HealthWatcher = (*Backend)(nil)

// WatchHealth implements plugin.HealthWatcher: every HealthInterval it
// asks npu-smi for each chip's health and calls changed when a chip turns
// unhealthy or recovers, so that the plugin republishes with the chip's
// devices tainted or not. A chip npu-smi cannot query is tainted alone;
// the others keep serving. A chip Discover could not read is retried each
// time. A zero interval watches nothing.
func (b *Backend) WatchHealth(ctx context.Context, changed func()) {
	accelerator.PollHealth(ctx, b.cfg.HealthInterval, func(ctx context.Context) bool {
		return b.probeHealth(ctx) || b.discoverFailed()
	}, changed)
}

// probeHealth queries every chip and reports whether any changed. A
// round is a pass (vendortool.NewPass): once npu-smi has timed out on a
// chip, the chips after it are not queried and are tainted ToolError
// with it.
func (b *Backend) probeHealth(ctx context.Context) bool {
	ctx = vendortool.NewPass(ctx)
	logger := klog.FromContext(ctx)
	changed := false
	for _, n := range b.npus { // fixed since New
		if ctx.Err() != nil {
			return changed
		}
		reason := ""
		h, err := b.cfg.Tool.Health(ctx, n.Card, n.chipID())
		if err != nil && ctx.Err() != nil {
			return changed // the watch ended mid-call: no verdict
		}
		switch {
		case err != nil:
			reason = accelerator.ToolError
		case !h.Healthy():
			reason = accelerator.TaintValue(append([]string{h.Status}, h.ErrorCodes...))
		}
		if !b.health.Set(n.PhyID, reason) {
			continue
		}
		changed = true
		switch {
		case err != nil:
			logger.Error(err, "Cannot read NPU health, tainting it", "npu", n.PhyID)
		case reason != "":
			logger.Info("NPU unhealthy, tainting it", "npu", n.PhyID, "status", h.Status, "errorCodes", h.ErrorCodes, "errorInformation", h.ErrorInfo)
		default:
			logger.Info("NPU healthy again", "npu", n.PhyID, "status", h.Status)
		}
	}
	return changed
}

func (b *Backend) discoverFailed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.npus {
		if n.discoverErr != nil {
			return true
		}
	}
	return false
}

// taintsLocked are the taints of a chip's devices: its health's, or
// ToolError where Discover could not read it.
func (b *Backend) taintsLocked(n *npu, health map[int]string) []resourceapi.DeviceTaint {
	reason := health[n.PhyID]
	if reason == "" && n.discoverErr != nil {
		reason = accelerator.ToolError
	}
	return accelerator.UnhealthyTaints(TaintUnhealthy, reason)
}
