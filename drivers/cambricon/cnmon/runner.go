package cnmon

import (
	"context"
	"time"

	"github.com/strata-sh/strata/internal/vendortool"
)

// DefaultBinary is where the Cambricon driver package installs cnmon
// (the device plugin's --cnmon-path=/usr/bin/cnmon; the driver's dkms
// packages install and remove /usr/bin/cnmon).
const DefaultBinary = "/usr/bin/cnmon"

// tool names cnmon in messages.
const tool = "cnmon"

// Runner runs cnmon with the given arguments and returns what it printed on
// stdout. A non-zero exit is an error; the output is returned with it, since
// cnmon prints its reasons on stdout.
type Runner = vendortool.Runner

// ExitError reports that cnmon exited with a non-zero status. cnmon's
// statuses are not documented publicly; callers should go by the output
// (see the package documentation).
type ExitError = vendortool.ExitError

// Exec runs the real cnmon binary.
type Exec struct {
	// Binary is the path of cnmon; empty means DefaultBinary.
	Binary string
	// Timeout bounds each call (0 means vendortool.DefaultTimeout); a
	// call past it is killed with every process cnmon forked.
	Timeout time.Duration
}

var _ Runner = Exec{}

// Run executes cnmon. Its stderr is folded into the returned error.
func (e Exec) Run(ctx context.Context, args ...string) ([]byte, error) {
	bin := e.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	return vendortool.Exec{Tool: tool, Binary: bin, Timeout: e.Timeout}.Run(ctx, args...)
}
