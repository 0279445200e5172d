// Package faketool is the body of the fake vendor programs in
// hardware/fakebin: a fake of one server's tool (package npusmimock,
// cnmonmock) answers each call, and the server's state is kept between
// calls in a file (package persist), as the driver keeps it between runs
// of the real tool. After a command that may change the state the program
// updates the device nodes the driver would have made or removed.
//
// A program's settings are in the JSON file named by its path plus
// ".json" (Settings).
package faketool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sh/strata/hardware/persist"
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

// Program is one fake program.
type Program struct {
	// New makes the fake of a server in its initial state.
	New func(Settings) (persist.Runner, error)
	// Mutating says whether a command may change the server's state.
	Mutating func(args []string) bool
	// Sync updates the device nodes to the server's state after a
	// command that may have changed it.
	Sync func(Settings, persist.Runner) error
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
	if len(args) == 3 && args[0] == fakeCommand && args[1] == "hang" {
		return nil, 0, hang(s.State, args[2])
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
	if len(args) == 0 || args[0] != fakeCommand {
		hung(s.State)
	}
	fresh, err := p.New(s)
	if err != nil {
		return nil, 0, err
	}
	ctx := context.Background()
	tool, err := persist.Open(ctx, s.State, fresh, p.Mutating)
	if err != nil {
		return nil, 0, err
	}
	out, err := tool.Run(ctx, args...)
	if code, ok := persist.IsExit(err); ok {
		return out, code, nil
	}
	if err != nil {
		return out, 0, err
	}
	if p.Mutating(args) && p.Sync != nil && s.DevRoot != "" {
		return out, 0, p.Sync(s, fresh)
	}
	return out, 0, nil
}

// fakeCommand starts the fakes' own commands, which no real tool has.
const fakeCommand = "strata-fake"

// hang makes every real command of the program wedge for the given
// duration from now ("<tool> strata-fake hang 60s"; "0s" ends it), as a
// tool stuck in the driver does: it does not answer, and the calls behind
// it wait.
func hang(state, duration string) error {
	d, err := time.ParseDuration(duration)
	if err != nil {
		return err
	}
	return os.WriteFile(state+".hang", []byte(time.Now().Add(d).Format(time.RFC3339Nano)), 0o644)
}

// hung sleeps while a hang is set.
func hung(state string) {
	raw, err := os.ReadFile(state + ".hang")
	if err != nil {
		return
	}
	until, err := time.Parse(time.RFC3339Nano, string(raw))
	if err == nil && time.Now().Before(until) {
		time.Sleep(time.Until(until))
	}
}
