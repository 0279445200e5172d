package nvidia

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ExecMPS runs the real nvidia-cuda-mps-control, one daemon per GPU with
// its own pipe and log directory under StateDir/mps/<uuid>.
type ExecMPS struct {
	// Binary is the control program; default "nvidia-cuda-mps-control".
	Binary string
	// StateDir is the backend's state directory, scanned by Running.
	StateDir string
	// LibraryDir, if set, is where the driver's libraries are (the
	// directory of the NVML library the plugin loaded): the program finds
	// them there, as it would on the host.
	LibraryDir string
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
	ctx, cancel := context.WithTimeout(ctx, ToolTimeout)
	defer cancel()
	cmd := toolCommand(ctx, e.binary(), "-d")
	cmd.Env = toolEnv(e.LibraryDir, "CUDA_VISIBLE_DEVICES="+gpuUUID, "CUDA_MPS_PIPE_DIRECTORY="+pipeDir, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	if out, err := runTool(cmd); err != nil {
		return fmt.Errorf("%s -d: %w: %s", e.binary(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Stop asks the daemon of a GPU to quit.
func (e ExecMPS) Stop(ctx context.Context, _, pipeDir string) error {
	ctx, cancel := context.WithTimeout(ctx, ToolTimeout)
	defer cancel()
	cmd := toolCommand(ctx, e.binary())
	cmd.Env = toolEnv(e.LibraryDir, "CUDA_MPS_PIPE_DIRECTORY="+pipeDir)
	cmd.Stdin = strings.NewReader("quit\n")
	if out, err := runTool(cmd); err != nil {
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

// ToolTimeout bounds every run of an NVIDIA program (nvidia-smi,
// nvidia-cuda-mps-control): a wedged one fails the call instead of
// hanging the plugin with its lock held.
var ToolTimeout = 30 * time.Second

// toolCommand is an NVIDIA program run in a process group of its own,
// killed whole when ctx ends: a wedged program and anything it started go,
// and waiting for its output ends a second later at most.
func toolCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd
}

// runTool runs cmd and returns what it printed. A program that exited
// cleanly but left a child holding its output open (a daemon it started)
// succeeded: that is what ErrWaitDelay reports then.
func runTool(cmd *exec.Cmd) ([]byte, error) {
	out, err := cmd.CombinedOutput()
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success() {
		err = nil
	}
	return out, err
}

// toolEnv is the environment of an NVIDIA program: the plugin's, the
// driver's library directory on the loader's path (the program is the
// host's, its libraries are under the driver root, not in the plugin's
// image), and extra.
func toolEnv(libraryDir string, extra ...string) []string {
	env := os.Environ()
	if libraryDir != "" {
		path := libraryDir
		for i, kv := range env {
			if v, ok := strings.CutPrefix(kv, "LD_LIBRARY_PATH="); ok {
				if v != "" {
					path += ":" + v
				}
				env = append(env[:i:i], env[i+1:]...)
				break
			}
		}
		env = append(env, "LD_LIBRARY_PATH="+path)
	}
	return append(env, extra...)
}
