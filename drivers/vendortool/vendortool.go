// Package vendortool runs a vendor's management program (npu-smi, cnmon)
// for the backends that drive hardware through one: the Runner interface
// their clients take (a fake in tests), the exec implementation, and the
// error that carries what the program printed, since these programs
// report their reasons on stdout.
package vendortool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Runner runs the program with the given arguments and returns what it
// printed on stdout. A non-zero exit is an error; the output is returned
// with it.
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// ExitError reports that the program exited with a non-zero status.
type ExitError struct {
	// Tool names the program in messages ("npu-smi").
	Tool string
	Args []string
	// Code is the exit status.
	Code int
	// Stderr is what the command wrote on stderr, trimmed.
	Stderr string
	// Err is the underlying error, if any.
	Err error
}

func (e *ExitError) Error() string {
	var b strings.Builder
	b.WriteString(e.Tool)
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

// Exec runs a program on the host.
type Exec struct {
	Tool   string
	Binary string
	// Env is added to the plugin's environment for the program only.
	Env []string
}

// Run executes the program; its stderr is folded into the returned error.
func (e Exec) Run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.Binary, args...)
	if len(e.Env) > 0 {
		cmd.Env = append(os.Environ(), e.Env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	ee := &ExitError{Tool: e.Tool, Args: args, Code: -1, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		ee.Code = xe.ExitCode()
	}
	return stdout.Bytes(), ee
}

// Failed makes the error of a failed command: it names the command (an
// ExitError does itself) and quotes what the program printed first.
func Failed(tool string, args []string, out []byte, err error) error {
	var ee *ExitError
	if !errors.As(err, &ee) {
		err = fmt.Errorf("%s %s: %w", tool, strings.Join(args, " "), err)
	}
	if fl := FailureText(out); fl != "" {
		err = fmt.Errorf("%w: %s", err, fl)
	}
	return err
}

// FailureText quotes up to the first two non-blank output lines.
func FailureText(out []byte) string {
	var ls []string
	for _, l := range strings.Split(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n") {
		if t := strings.TrimSpace(l); t != "" {
			ls = append(ls, strconv.Quote(t))
			if len(ls) == 2 {
				break
			}
		}
	}
	return strings.Join(ls, ", ")
}
