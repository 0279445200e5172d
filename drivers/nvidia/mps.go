package nvidia

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ExecMPS runs the real nvidia-cuda-mps-control, one daemon per GPU with
// its own pipe and log directory under StateDir/mps/<uuid>.
type ExecMPS struct {
	// Binary is the control program; default "nvidia-cuda-mps-control".
	Binary string
	// StateDir is the backend's state directory, scanned by Running.
	StateDir string
}

var _ MPSControl = ExecMPS{}

func (e ExecMPS) binary() string {
	if e.Binary == "" {
		return "nvidia-cuda-mps-control"
	}
	return e.Binary
}

// Start launches the daemon of a GPU.
func (e ExecMPS) Start(ctx context.Context, gpuUUID, pipeDir, logDir string) error {
	for _, dir := range []string{pipeDir, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, e.binary(), "-d")
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+gpuUUID, "CUDA_MPS_PIPE_DIRECTORY="+pipeDir, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s -d: %w: %s", e.binary(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Stop asks the daemon of a GPU to quit.
func (e ExecMPS) Stop(ctx context.Context, _, pipeDir string) error {
	cmd := exec.CommandContext(ctx, e.binary())
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipeDir)
	cmd.Stdin = strings.NewReader("quit\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s quit: %w: %s", e.binary(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Running lists GPUs whose daemon left a control pipe.
func (e ExecMPS) Running() []string {
	pipes, _ := filepath.Glob(filepath.Join(e.StateDir, "mps", "*", "pipe", "control"))
	out := make([]string, 0, len(pipes))
	for _, p := range pipes {
		out = append(out, filepath.Base(filepath.Dir(filepath.Dir(p))))
	}
	return out
}
