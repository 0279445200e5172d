package nvmlmock

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// MPS stands in for the MPS control daemons of a simulated node whose
// plugin runs in-process (strata-sim): it records which GPUs run a daemon
// and creates the daemon's control endpoint in the pipe directory (as
// MPSSocket). Its daemons belong to the node, not to the plugin, so they
// outlive a plugin restart, as daemon pods do; Kill ends one as a crash
// would, leaving its files. A node whose plugin runs in a container uses
// the program fake (MPSControlMain) instead.
type MPS struct {
	mu      sync.Mutex
	running map[string]string // GPU UUID -> pipe directory
	dead    map[string]bool   // killed, files left
	starts  int
}

// NewMPS returns a fake with no daemon running.
func NewMPS() *MPS { return &MPS{running: map[string]string{}, dead: map[string]bool{}} }

// Ensure starts the daemon of a GPU unless it runs.
func (m *MPS) Ensure(_ context.Context, gpuUUID, dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.running[gpuUUID]; ok {
		return nil
	}
	pipeDir := filepath.Join(dir, "pipe")
	for _, d := range []string{pipeDir, filepath.Join(dir, "log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(pipeDir, MPSSocket), nil, 0o600); err != nil {
		return err
	}
	m.running[gpuUUID] = pipeDir
	delete(m.dead, gpuUUID)
	m.starts++
	return nil
}

// Stop stops the daemon of a GPU and removes its pipe directory.
func (m *MPS) Stop(_ context.Context, gpuUUID, dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.running, gpuUUID)
	delete(m.dead, gpuUUID)
	return os.RemoveAll(filepath.Join(dir, "pipe"))
}

// List reports the daemons that run, and those killed whose files are
// left.
func (m *MPS) List(_ context.Context) (map[string]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for uuid := range m.dead {
		out[uuid] = false
	}
	for uuid := range m.running {
		out[uuid] = true
	}
	return out, nil
}

// Kill ends the daemon of a GPU as a crash would: its files stay.
func (m *MPS) Kill(gpuUUID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.running[gpuUUID]; ok {
		delete(m.running, gpuUUID)
		m.dead[gpuUUID] = true
	}
}

// Starts counts the daemons started.
func (m *MPS) Starts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.starts
}

// Running lists the GPUs with a daemon.
func (m *MPS) Running() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.running))
	for uuid := range m.running {
		out = append(out, uuid)
	}
	sort.Strings(out)
	return out
}
