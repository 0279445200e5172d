package nvmlmock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// MPS stands in for nvidia-cuda-mps-control: it records which GPUs run an
// MPS control daemon and creates the daemon's control pipe in the pipe
// directory, as the real daemon does.
type MPS struct {
	mu      sync.Mutex
	running map[string]string // GPU UUID -> pipe directory
}

// NewMPS returns a fake with no daemon running.
func NewMPS() *MPS { return &MPS{running: map[string]string{}} }

// Start starts the daemon of a GPU.
func (m *MPS) Start(_ context.Context, gpuUUID, pipeDir, logDir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.running[gpuUUID]; ok {
		return fmt.Errorf("an MPS control daemon already runs for %s", gpuUUID)
	}
	for _, dir := range []string{pipeDir, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(pipeDir, "control"), nil, 0o600); err != nil {
		return err
	}
	m.running[gpuUUID] = pipeDir
	return nil
}

// Stop stops the daemon of a GPU.
func (m *MPS) Stop(_ context.Context, gpuUUID, pipeDir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.running, gpuUUID)
	return os.RemoveAll(pipeDir)
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
