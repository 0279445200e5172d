package cnmon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// DefaultBinary is where the Cambricon driver package installs cnmon
// (the device plugin's --cnmon-path=/usr/bin/cnmon; the driver's dkms
// packages install and remove /usr/bin/cnmon).
const DefaultBinary = "/usr/bin/cnmon"

// Runner runs cnmon with the given arguments and returns what it printed on
// stdout. A non-zero exit is an error; the output is returned with it, since
// cnmon prints its reasons on stdout.
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// ExitError reports that cnmon exited with a non-zero status.
type ExitError struct {
	Args []string
	// Code is the exit status. cnmon's statuses are not documented
	// publicly; callers should go by the output (see the package
	// documentation).
	Code int
	// Stderr is what the command wrote on stderr, trimmed.
	Stderr string
	// Err is the underlying error, if any.
	Err error
}

func (e *ExitError) Error() string {
	var b strings.Builder
	b.WriteString("cnmon")
	if len(e.Args) > 0 {
		b.WriteString(" " + strings.Join(e.Args, " "))
	}
	fmt.Fprintf(&b, ": exit status %d", e.Code)
	if e.Stderr != "" {
		fmt.Fprintf(&b, ": %s", e.Stderr)
	}
	return b.String()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode returns the exit status, like os/exec's ExitError.
func (e *ExitError) ExitCode() int { return e.Code }

// Exec runs the real cnmon binary.
type Exec struct {
	// Binary is the path of cnmon; empty means DefaultBinary.
	Binary string
}

var _ Runner = Exec{}

// Run executes cnmon. Its stderr is folded into the returned error.
func (e Exec) Run(ctx context.Context, args ...string) ([]byte, error) {
	bin := e.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	cmd := exec.CommandContext(ctx, bin, args...)
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
