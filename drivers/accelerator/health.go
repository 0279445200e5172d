package accelerator

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

// Health polling shared by the drivers whose vendor tool reports device
// health (npu-smi, cnmon): what is wrong with each device, the loop that
// polls, and the taint that says it in the published slices.

// ToolError is the taint reason of a device its vendor tool cannot query.
const ToolError = "ToolError"

// Health holds why each device is unhealthy, by the driver's device id;
// a device that is not there is healthy. It has its own lock so that a
// probe, which runs the vendor tool, never waits for a prepare holding
// the backend's.
type Health struct {
	mu     sync.Mutex
	reason map[int]string
}

// Set records a device's reason ("" healthy) and reports a change.
func (s *Health) Set(id int, reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == nil {
		s.reason = map[int]string{}
	}
	if s.reason[id] == reason {
		return false
	}
	if reason == "" {
		delete(s.reason, id)
	} else {
		s.reason[id] = reason
	}
	return true
}

// Snapshot returns every unhealthy device's reason.
func (s *Health) Snapshot() map[int]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.reason)
}

// PollHealth runs probe at once and then every interval until ctx ends,
// and calls changed whenever probe reports a change. A zero interval
// polls nothing.
func PollHealth(ctx context.Context, interval time.Duration, probe func(context.Context) bool, changed func()) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if probe(ctx) {
			changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// UnhealthyTaints are the taints of a device with reason: one NoSchedule
// taint under key valued with the reason, none for a healthy device.
func UnhealthyTaints(key, reason string) []resourceapi.DeviceTaint {
	if reason == "" {
		return nil
	}
	return []resourceapi.DeviceTaint{{Key: key, Value: reason, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
}

// TaintValue joins words into a taint value, which must be a label
// value: at most 63 characters of [A-Za-z0-9_.-], alphanumeric at both
// ends. Other characters become '-'.
func TaintValue(words []string) string {
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
