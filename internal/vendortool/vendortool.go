// Package vendortool runs a vendor's management program (npu-smi, cnmon)
// for the backends that drive hardware through one: the Runner interface
// their clients take (a fake in tests), the exec implementation, and the
// error that carries what the program printed, since these programs
// report their reasons on stdout. Every call has a deadline: a vendor tool
// that wedges (a driver stuck in the kernel, a hung management daemon)
// must not hang the plugin, which runs it while it holds its lock; and a
// pass over a node's devices (NewPass) stops calling a tool that has
// timed out, so that the deadlines of its devices do not add up.
//
// The fakes of these programs (hardware/npusmimock, hardware/cnmonmock)
// are Runners too and fail with an ExitError as the programs do. The
// package sits outside drivers/ so that they import no driver package.
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
	"syscall"
	"time"
)

// DefaultTimeout bounds one call of a vendor tool when Exec names none.
// npu-smi and cnmon answer in well under a second on a healthy host; a
// vNPU or sMLU creation takes a few seconds.
const DefaultTimeout = 30 * time.Second

// waitDelay is how long Run waits, once the tool has exited or been
// killed, for processes it left behind to release its output pipes: a
// tool that forks a helper which escapes its process group must not hold
// the call open.
const waitDelay = 2 * time.Second

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

// TimeoutError reports a call that did not finish within its deadline;
// the tool's whole process group was killed.
type TimeoutError struct {
	Tool    string
	Args    []string
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s: no answer within %s, killed", e.command(), e.Timeout)
}

// command is the command line that timed out.
func (e *TimeoutError) command() string {
	if len(e.Args) == 0 {
		return e.Tool
	}
	return e.Tool + " " + strings.Join(e.Args, " ")
}

// Unwrap makes a TimeoutError a context.DeadlineExceeded for errors.Is.
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// Exec runs a program on the host.
type Exec struct {
	Tool   string
	Binary string
	// Env is added to the plugin's environment for the program only.
	Env []string
	// Input, if set, is the program's standard input (commands to a
	// client such as nvidia-cuda-mps-control).
	Input string
	// Timeout bounds one call (0 means DefaultTimeout). When it expires
	// the program's process group is killed, children it forked
	// included, and Run returns a *TimeoutError.
	Timeout time.Duration
}

// Run executes the program; its stderr is folded into the returned error.
// The program leads a process group of its own, so that a deadline kills
// every process it forked, not only itself.
func (e Exec) Run(ctx context.Context, args ...string) ([]byte, error) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(callCtx, e.Binary, args...)
	if len(e.Env) > 0 {
		cmd.Env = append(os.Environ(), e.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	if e.Input != "" {
		cmd.Stdin = strings.NewReader(e.Input)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil || (errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success()) {
		// ErrWaitDelay after a success: the tool answered and exited,
		// and something it started still held its output.
		return stdout.Bytes(), nil
	}
	if timedOut(ctx, callCtx) {
		return stdout.Bytes(), &TimeoutError{Tool: e.Tool, Args: args, Timeout: timeout}
	}
	ee := &ExitError{Tool: e.Tool, Args: args, Code: -1, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		ee.Code = xe.ExitCode()
	}
	return stdout.Bytes(), ee
}

// timedOut says whether a call ended by its own deadline, callCtx's,
// rather than by its caller giving up, ctx.
func timedOut(ctx, callCtx context.Context) bool {
	return ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded)
}

// Bounded gives the calls of an in-process Runner (a fake of the tool)
// the deadline Exec gives a program's: the call's context ends at the
// deadline, and a call that ends then fails with a *TimeoutError, as
// Exec's does. A fake that models a wedged tool blocks until its context
// ends, as a program does until it is killed.
type Bounded struct {
	Runner Runner
	// Tool names the program in errors ("npu-smi").
	Tool string
	// Timeout bounds one call (0 means DefaultTimeout).
	Timeout time.Duration
}

// Run runs the call under its deadline.
func (b Bounded) Run(ctx context.Context, args ...string) ([]byte, error) {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := b.Runner.Run(callCtx, args...)
	if err != nil && timedOut(ctx, callCtx) {
		return out, &TimeoutError{Tool: b.Tool, Args: args, Timeout: timeout}
	}
	return out, err
}

// Failed makes the error of a failed command: it names the command (an
// ExitError and a TimeoutError do themselves, and a SkippedError names
// the call that timed out) and quotes what the program printed first.
func Failed(tool string, args []string, out []byte, err error) error {
	var ee *ExitError
	var te *TimeoutError
	var se *SkippedError
	if !errors.As(err, &ee) && !errors.As(err, &te) && !errors.As(err, &se) {
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
