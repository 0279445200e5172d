package vendortool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestExecReportsStatusStderrAndOutput(t *testing.T) {
	x := Exec{Tool: "tool", Binary: "/bin/sh", Env: []string{"GREETING=hello"}}
	out, err := x.Run(context.Background(), "-c", `echo "$GREETING"`)
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("run: %q, %v; want the program's own env var printed", out, err)
	}
	out, err = x.Run(context.Background(), "-c", "echo 'Error parameter of -v.'; echo usage; echo oops >&2; exit 215")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 215 || ee.Stderr != "oops" {
		t.Fatalf("failure: %v, want exit 215 with stderr oops", err)
	}
	got := Failed("tool", []string{"-c", "..."}, out, err).Error()
	want := `tool -c echo 'Error parameter of -v.'; echo usage; echo oops >&2; exit 215: exit status 215: oops: "Error parameter of -v.", "usage"`
	if got != want {
		t.Errorf("error\n got %s\nwant %s", got, want)
	}
	if got := Failed("tool", []string{"info"}, []byte("\n  first\n"), errors.New("boom")).Error(); got != `tool info: boom: "first"` {
		t.Errorf("plain error: %s", got)
	}
}

// A wedged tool that forked a helper: the call returns once its deadline
// has passed, with an error naming the tool, its arguments and the
// deadline, and the helper is killed with the tool.
func TestExecKillsProcessGroupAtDeadline(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "wedged")
	pidFile := filepath.Join(dir, "child.pid")
	body := "#!/bin/sh\nsleep 300 &\necho $! > " + pidFile + "\nsleep 300\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	x := Exec{Tool: "npu-smi", Binary: script, Timeout: timeout}
	start := time.Now()
	_, err := x.Run(context.Background(), "info", "-m")
	elapsed := time.Since(start)
	var te *TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("run: %v, want a timeout", err)
	}
	if want := "npu-smi info -m: no answer within 300ms, killed"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if elapsed < timeout {
		t.Errorf("returned after %s, before its deadline", elapsed)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	// The child is reparented when the tool dies; whoever reaps it, it
	// must be dead (gone, or a zombie awaiting its reaper).
	for !dead(pid) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the tool's child %d outlived the deadline", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := Failed("npu-smi", []string{"info", "-m"}, nil, te).Error(); got != "npu-smi info -m: no answer within 300ms, killed" {
		t.Errorf("Failed: %s", got)
	}
}

func dead(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the
	// last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// A cancelled caller is not a timeout: the error says the context ended.
func TestExecCallerCancelIsNotTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Exec{Tool: "tool", Binary: "/bin/sh"}.Run(ctx, "-c", "sleep 300")
	var te *TimeoutError
	if err == nil || errors.As(err, &te) {
		t.Fatalf("run: %v, want a non-timeout error", err)
	}
}

// hanging is an in-process tool that does not answer until its caller
// gives up, and counts the calls it got.
type hanging struct{ calls int }

func (h *hanging) Run(ctx context.Context, _ ...string) ([]byte, error) {
	h.calls++
	<-ctx.Done()
	return nil, ctx.Err()
}

// Bounded gives an in-process tool Exec's deadline and Exec's error.
func TestBoundedTimesOutAsExecDoes(t *testing.T) {
	b := Bounded{Runner: &hanging{}, Tool: "cnmon", Timeout: 50 * time.Millisecond}
	_, err := b.Run(context.Background(), "info", "-c", "3")
	var te *TimeoutError
	if !errors.As(err, &te) || err.Error() != "cnmon info -c 3: no answer within 50ms, killed" {
		t.Fatalf("run: %v, want a timeout naming the call", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Run(ctx, "info"); err == nil || errors.As(err, &te) {
		t.Errorf("cancelled caller: %v, want a non-timeout error", err)
	}
}

// Once a call of a pass has timed out, the pass's later calls are not
// made and name the call that timed out; a new pass calls again, and
// calls outside a pass are never skipped.
func TestPassSkipsCallsAfterATimeout(t *testing.T) {
	h := &hanging{}
	r := Bounded{Runner: h, Tool: "npu-smi", Timeout: 20 * time.Millisecond}
	ctx := NewPass(context.Background())
	for i := range 8 {
		_, err := Call(ctx, r, "info", "-t", "health", "-i", strconv.Itoa(i), "-c", "0")
		var te *TimeoutError
		var se *SkippedError
		switch {
		case i == 0 && !errors.As(err, &te):
			t.Fatalf("first call: %v, want a timeout", err)
		case i > 0 && !errors.As(err, &se):
			t.Fatalf("call %d: %v, want it skipped", i, err)
		case i > 0:
			if want := "npu-smi info -t health -i 0 -c 0 timed out after 20ms; not queried in this pass"; err.Error() != want {
				t.Errorf("call %d: %q, want %q", i, err, want)
			}
			if got := Failed("npu-smi", []string{"info"}, nil, err).Error(); got != err.Error() {
				t.Errorf("Failed rewrote a skipped call's error to %q", got)
			}
		}
	}
	if h.calls != 1 {
		t.Errorf("the tool got %d calls in the pass, want 1", h.calls)
	}
	if _, err := Call(NewPass(context.Background()), r, "info"); !errors.As(err, new(*TimeoutError)) {
		t.Errorf("a new pass: %v, want the tool called again", err)
	}
	for range 2 {
		if _, err := Call(context.Background(), r, "info"); !errors.As(err, new(*TimeoutError)) {
			t.Errorf("outside a pass: %v, want the tool called", err)
		}
	}
	if h.calls != 4 {
		t.Errorf("the tool got %d calls in all, want 4", h.calls)
	}
}
