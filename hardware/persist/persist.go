// Package persist keeps the state of a fake vendor tool (npusmimock,
// cnmonmock) in a file, as a driver keeps its devices' state between runs
// of the real tool and between restarts of the program that calls it:
// every command that may change the state and succeeded is appended to
// the file, and replayed into a fresh fake when the file is opened again.
package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Runner is a fake tool.
type Runner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// Tool is a fake tool whose state changes are kept in a file.
type Tool struct {
	Runner
	file     string
	mutating func(args []string) bool

	mu sync.Mutex
}

// Open replays the commands file holds into fresh (a fake in its initial
// state) and returns the tool that records later ones; mutating says
// which commands may change the state.
func Open(ctx context.Context, file string, fresh Runner, mutating func(args []string) bool) (*Tool, error) {
	history, err := read(file)
	if err != nil {
		return nil, err
	}
	for _, h := range history {
		if _, err := fresh.Run(ctx, h...); err != nil {
			return nil, fmt.Errorf("replaying %v from %s: %w", h, file, err)
		}
	}
	return &Tool{Runner: fresh, file: file, mutating: mutating}, nil
}

// Run runs a command and, when it may have changed the state and
// succeeded, records it. A refusal (the tool's non-zero exit) is not
// recorded.
func (t *Tool) Run(ctx context.Context, args ...string) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out, err := t.Runner.Run(ctx, args...)
	if err != nil || !t.mutating(args) {
		return out, err
	}
	if err := appendLine(t.file, args); err != nil {
		return out, fmt.Errorf("record %v: %w", args, err)
	}
	return out, nil
}

// IsExit reports the tool's exit status if err is one: any error with
// an ExitCode method, as a fake's refusal and exec's exit errors have.
func IsExit(err error) (int, bool) {
	var exit interface{ ExitCode() int }
	if errors.As(err, &exit) {
		return exit.ExitCode(), true
	}
	return 0, false
}

func read(path string) ([][]string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var args []string
		if err := json.Unmarshal([]byte(line), &args); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		h = append(h, args)
	}
	return h, nil
}

// appendLine adds one command and syncs it: a crash right after a change
// must not lose it, as the hardware would not.
func appendLine(path string, args []string) error {
	line, err := json.Marshal(args)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
