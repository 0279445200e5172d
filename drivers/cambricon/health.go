package cambricon

import (
	"context"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// TaintUnhealthy is the taint on a card whose cnmon info reports a
// Health State other than Device Good and Driver Running, or that cnmon
// cannot query. Its value is the reason: the states that are wrong
// ("Device-Bad") or ToolError.
const TaintUnhealthy = DriverName + "/unhealthy"

// DefaultHealthInterval is how often the app polls the cards' health:
// one cnmon info run per card each time.
const DefaultHealthInterval = 30 * time.Second

var _ plugin.HealthWatcher = (*Backend)(nil)

// WatchHealth implements plugin.HealthWatcher: every HealthInterval it
// reads each card's Health State with cnmon info -c N and calls changed
// when a card turns unhealthy or recovers, so that the plugin republishes
// with the card tainted or not. A card cnmon cannot query is tainted
// alone; the others keep serving. A card Discover could not read is
// retried each time. A zero interval watches nothing.
func (b *Backend) WatchHealth(ctx context.Context, changed func()) {
	accelerator.PollHealth(ctx, b.cfg.HealthInterval, func(ctx context.Context) bool {
		return b.probeHealth(ctx) || b.discoverFailed()
	}, changed)
}

// probeHealth queries every card and reports whether any changed. A
// round is a pass (vendortool.NewPass): once cnmon has timed out on a
// card, the cards after it are not queried and are tainted ToolError with
// it.
func (b *Backend) probeHealth(ctx context.Context) bool {
	ctx = vendortool.NewPass(ctx)
	logger := klog.FromContext(ctx)
	changed := false
	for _, c := range b.cards { // fixed since New
		if ctx.Err() != nil {
			return changed
		}
		h, err := b.cfg.Tool.Health(ctx, c.Index)
		if err != nil && ctx.Err() != nil {
			return changed // the watch ended mid-call: no verdict
		}
		reason := ""
		switch {
		case err != nil:
			reason = accelerator.ToolError
		case !h.Healthy():
			var words []string
			if h.Device != "Good" {
				words = append(words, "Device", h.Device)
			}
			if h.Driver != "Running" {
				words = append(words, "Driver", h.Driver)
			}
			reason = accelerator.TaintValue(words)
		}
		if !b.health.Set(c.Index, reason) {
			continue
		}
		changed = true
		switch {
		case err != nil:
			logger.Error(err, "Cannot read MLU health, tainting it", "card", c.Index)
		case reason != "":
			logger.Info("MLU unhealthy, tainting it", "card", c.Index, "device", h.Device, "driver", h.Driver)
		default:
			logger.Info("MLU healthy again", "card", c.Index)
		}
	}
	return changed
}

func (b *Backend) discoverFailed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.cards {
		if c.discoverErr != nil {
			return true
		}
	}
	return false
}

// taintsLocked are the taints of a card: its health's, or ToolError
// where Discover could not read it.
func (b *Backend) taintsLocked(c *card, health map[int]string) []resourceapi.DeviceTaint {
	reason := health[c.Index]
	if reason == "" && c.discoverErr != nil {
		reason = accelerator.ToolError
	}
	return accelerator.UnhealthyTaints(TaintUnhealthy, reason)
}
