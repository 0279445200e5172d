package npusmi

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-sh/strata/internal/vendortool"
)

// DefaultBinary is where the Ascend driver package installs npu-smi.
const DefaultBinary = "/usr/local/bin/npu-smi"

// tool names npu-smi in messages.
const tool = "npu-smi"

// Runner runs npu-smi with the given arguments and returns what it printed
// on stdout. A non-zero exit is an error; the output is returned with it,
// since npu-smi prints its reasons on stdout.
type Runner = vendortool.Runner

// ExitError reports that npu-smi exited with a non-zero status. npu-smi
// exits with its internal error code truncated to a byte: 215 for an
// invalid parameter (-9001), 217 for an unsupported operation or
// insufficient resources (-9255).
type ExitError = vendortool.ExitError

// Exec runs the real npu-smi binary.
type Exec struct {
	// Binary is the path of npu-smi; empty means DefaultBinary.
	Binary string
	// DriverRoot is the Ascend driver's install root. Set, npu-smi runs
	// with the driver's library folders on its LD_LIBRARY_PATH (only its
	// own: the plugin's environment is left alone), as it needs them
	// outside the host's loader configuration, in a container.
	DriverRoot string
	// Timeout bounds each call (0 means vendortool.DefaultTimeout); a
	// call past it is killed with every process npu-smi forked.
	Timeout time.Duration
}

var _ Runner = Exec{}

// Run executes npu-smi. Its stderr is folded into the returned error.
func (e Exec) Run(ctx context.Context, args ...string) ([]byte, error) {
	x := vendortool.Exec{Tool: tool, Binary: e.Binary, Timeout: e.Timeout}
	if x.Binary == "" {
		x.Binary = DefaultBinary
	}
	if e.DriverRoot != "" {
		lib := filepath.Join(e.DriverRoot, "lib64")
		x.Env = []string{"LD_LIBRARY_PATH=" + strings.Join([]string{lib, filepath.Join(lib, "common"), filepath.Join(lib, "driver")}, ":")}
	}
	return x.Run(ctx, args...)
}
