// Package faketool is the body of the fake vendor programs in
// hardware/fakebin: a fake of one server's tool (package npusmimock,
// cnmonmock) answers each call, and the server's state is kept between
// calls in a file, as the driver keeps it between runs of the real tool:
// every command that may change the state and succeeded is replayed on
// the next call. After a command the program updates the device nodes
// the driver would have made or removed.
//
// A program's settings are in the JSON file named by its path plus
// ".json" (Settings).
package faketool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-sh/strata/drivers/vendortool"
)

// Settings describe the faked server.
type Settings struct {
	// Model names the chip where the fake has several (npu-smi).
	Model string `json:"model,omitempty"`
	// Devices is the number of NPUs or cards.
	Devices int `json:"devices"`
	// State is the file the server's history is kept in.
	State string `json:"state"`
	// DevRoot prefixes the device nodes the program makes ("" makes none).
	DevRoot string `json:"devRoot,omitempty"`
	// DevChar is the server's sysfs /sys/dev/char, where the kernel lists
	// the nodes a driver makes (cnmon's sMLU capabilities).
	DevChar string `json:"devChar,omitempty"`
}

// Tool is a fake tool.
type Tool interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// Program is one fake program.
type Program struct {
	// New makes the fake of a server in its initial state.
	New func(Settings) (Tool, error)
	// Mutating says whether a command may change the server's state.
	Mutating func(args []string) bool
	// Sync updates the device nodes to the server's state after a
	// command that changed it.
	Sync func(Settings, Tool) error
}

// Main runs the program on the process's arguments and exits with the
// tool's status.
func (p Program) Main(name string) {
	out, code, err := p.run(os.Args[1:])
	os.Stdout.Write(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s (fake): %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func (p Program) run(args []string) ([]byte, int, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, 0, err
	}
	raw, err := os.ReadFile(self + ".json")
	if err != nil {
		return nil, 0, err
	}
	var s Settings
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, 0, fmt.Errorf("%s.json: %w", self, err)
	}
	// One call at a time, as the driver serialises changes.
	lock, err := os.OpenFile(s.State+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, 0, err
	}
	tool, err := p.New(s)
	if err != nil {
		return nil, 0, err
	}
	history, err := readHistory(s.State)
	if err != nil {
		return nil, 0, err
	}
	ctx := context.Background()
	for _, h := range history {
		if _, err := tool.Run(ctx, h...); err != nil {
			return nil, 0, fmt.Errorf("replaying %v from %s: %w", h, s.State, err)
		}
	}
	out, err := tool.Run(ctx, args...)
	if exit, ok := errors.AsType[*vendortool.ExitError](err); ok {
		return out, exit.Code, nil
	}
	if err != nil {
		return out, 0, err
	}
	if !p.Mutating(args) {
		return out, 0, nil
	}
	if err := writeHistory(s.State, append(history, args)); err != nil {
		return out, 0, err
	}
	if p.Sync != nil && s.DevRoot != "" {
		return out, 0, p.Sync(s, tool)
	}
	return out, 0, nil
}

func readHistory(path string) ([][]string, error) {
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

func writeHistory(path string, h [][]string) error {
	var b strings.Builder
	for _, args := range h {
		line, _ := json.Marshal(args)
		b.Write(line)
		b.WriteByte('\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
