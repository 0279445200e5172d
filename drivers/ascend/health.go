package ascend

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

// TaintUnhealthy is the taint on every device of a chip that npu-smi
// reports unhealthy (Health Status Alarm or Critical) or that npu-smi
// cannot query. Its value is the reason: the state and its fault codes
// ("Alarm-80E01801"), cut to a label value's 63 characters, or
// ToolError.
const TaintUnhealthy = DriverName + "/unhealthy"

// reasonToolError is the taint value of a chip npu-smi fails to query.
const reasonToolError = "ToolError"

// DefaultHealthInterval is how often the app polls the chips' health:
// one npu-smi run per chip each time.
const DefaultHealthInterval = 30 * time.Second

var _ plugin.HealthWatcher = (*Backend)(nil)

// healthState holds why each chip is unhealthy, by physical id; a chip
// that is not there is healthy. It has its own lock so that a probe,
// which runs npu-smi, never waits for a prepare holding the backend's.
type healthState struct {
	mu     sync.Mutex
	reason map[int]string
}

// set records a chip's reason ("" healthy) and reports a change.
func (s *healthState) set(phyID int, reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == nil {
		s.reason = map[int]string{}
	}
	if s.reason[phyID] == reason {
		return false
	}
	if reason == "" {
		delete(s.reason, phyID)
	} else {
		s.reason[phyID] = reason
	}
	return true
}

func (s *healthState) snapshot() map[int]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.reason)
}

// WatchHealth implements plugin.HealthWatcher: every HealthInterval it
// asks npu-smi for each chip's health and calls changed when a chip turns
// unhealthy or recovers, so that the plugin republishes with the chip's
// devices tainted or not. A chip npu-smi cannot query is tainted alone;
// the others keep serving. A chip Discover could not read is retried each
// time. A zero interval watches nothing.
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

// probeHealth queries every chip and reports whether any changed.
func (b *Backend) probeHealth(ctx context.Context) bool {
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
			reason = reasonToolError
		case !h.Healthy():
			reason = taintValue(append([]string{h.Status}, h.ErrorCodes...))
		}
		if !b.health.set(n.PhyID, reason) {
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
