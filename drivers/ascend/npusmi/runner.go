package npusmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultBinary is where the Ascend driver package installs npu-smi.
const DefaultBinary = "/usr/local/bin/npu-smi"

// Runner runs npu-smi with the given arguments and returns what it printed
// on stdout. A non-zero exit is an error; the output is returned with it,
// since npu-smi prints its reasons on stdout.
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// ExitError reports that npu-smi exited with a non-zero status.
type ExitError struct {
	Args []string
	// Code is the exit status. npu-smi exits with its internal error code
	// truncated to a byte: 215 for an invalid parameter (-9001), 217 for an
	// unsupported operation or insufficient resources (-9255).
	Code int
	// Stderr is what the command wrote on stderr, trimmed.
	Stderr string
	// Err is the underlying error, if any.
	Err error
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "npu-smi %s: exit status %d", strings.Join(e.Args, " "), e.Code)
	if e.Stderr != "" {
		fmt.Fprintf(&b, ": %s", e.Stderr)
	}
	return b.String()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode returns the exit status, like os/exec's ExitError.
func (e *ExitError) ExitCode() int { return e.Code }

// Exec runs the real npu-smi binary.
type Exec struct {
	// Binary is the path of npu-smi; empty means DefaultBinary.
	Binary string
	// DriverRoot is the Ascend driver's install root. Set, npu-smi runs
	// with the driver's library folders on its LD_LIBRARY_PATH (only its
	// own: the plugin's environment is left alone), as it needs them
	// outside the host's loader configuration, in a container.
	DriverRoot string
}

var _ Runner = Exec{}

// Run executes npu-smi. Its stderr is folded into the returned error.
func (e Exec) Run(ctx context.Context, args ...string) ([]byte, error) {
	bin := e.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	if e.DriverRoot != "" {
		lib := filepath.Join(e.DriverRoot, "lib64")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+strings.Join([]string{lib, filepath.Join(lib, "common"), filepath.Join(lib, "driver")}, ":"))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	ee := &ExitError{Args: args, Code: -1, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		ee.Code = xe.ExitCode()
	}
	return stdout.Bytes(), ee
}
