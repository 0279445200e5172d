package cambricon

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/plugin"
)

// TaintUnhealthy is the taint on a card whose cnmon info reports a
// Health State other than Device Good and Driver Running, or that cnmon
// cannot query. Its value is the reason: the states that are wrong
// ("Device-Bad") or ToolError.
const TaintUnhealthy = DriverName + "/unhealthy"

// reasonToolError is the taint value of a card cnmon fails to query.
const reasonToolError = "ToolError"

// DefaultHealthInterval is how often the app polls the cards' health:
// one cnmon info run per card each time.
const DefaultHealthInterval = 30 * time.Second

var _ plugin.HealthWatcher = (*Backend)(nil)

// healthState holds why each card is unhealthy, by index; a card that is
// not there is healthy. It has its own lock so that a probe, which runs
// cnmon, never waits for a prepare holding the backend's.
type healthState struct {
	mu     sync.Mutex
	reason map[int]string
}

// set records a card's reason ("" healthy) and reports a change.
func (s *healthState) set(card int, reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == nil {
		s.reason = map[int]string{}
	}
	if s.reason[card] == reason {
		return false
	}
	if reason == "" {
		delete(s.reason, card)
	} else {
		s.reason[card] = reason
	}
	return true
}

func (s *healthState) snapshot() map[int]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.reason)
}

// WatchHealth implements plugin.HealthWatcher: every HealthInterval it
// reads each card's Health State with cnmon info -c N and calls changed
// when a card turns unhealthy or recovers, so that the plugin republishes
// with the card tainted or not. A card cnmon cannot query is tainted
// alone; the others keep serving. A card Discover could not read is
// retried each time. A zero interval watches nothing.
func (b *Backend) WatchHealth(ctx context.Context, changed func()) {
	if b.cfg.HealthInterval <= 0 {
		return
	}
	t := time.NewTicker(b.cfg.HealthInterval)
	defer t.Stop()
	for {
		if b.probeHealth(ctx) || b.discoverFailed() {
			changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeHealth queries every card and reports whether any changed.
func (b *Backend) probeHealth(ctx context.Context) bool {
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
			reason = reasonToolError
		case !h.Healthy():
			var words []string
			if h.Device != "Good" {
				words = append(words, "Device", h.Device)
			}
			if h.Driver != "Running" {
				words = append(words, "Driver", h.Driver)
			}
			reason = taintValue(words)
		}
		if !b.health.set(c.Index, reason) {
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
		reason = reasonToolError
	}
	if reason == "" {
		return nil
	}
	return []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: reason, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
}

// taintValue joins words into a taint value, which must be a label
// value: at most 63 characters of [A-Za-z0-9_.-], alphanumeric at both
// ends. Other characters become '-'.
func taintValue(words []string) string {
	v := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, strings.Join(words, "-"))
	if len(v) > 63 {
		v = v[:63]
	}
	v = strings.Trim(v, "-_.")
	if v == "" {
		return "Unhealthy"
	}
	return v
}
