// Package wedge is the hang of a fake vendor tool (npu-smi, cnmon): while
// it is on, the commands it applies to are recorded and then do not answer
// until their caller gives up (its context ends, as at a vendortool
// deadline) or the hang is lifted, as a tool does when the driver is stuck
// in the kernel.
package wedge

import (
	"context"
	"slices"
	"strconv"
	"sync"
)

// Wedge holds the hang of one fake. Its methods are called with the
// fake's lock held.
type Wedge struct {
	// DeviceFlag is the flag a command names its device with ("-i" for
	// npu-smi, "-c" for cnmon); FakeCommand starts the fake's own
	// commands, which never wedge.
	DeviceFlag, FakeCommand string
	cur                     *hang
}

type hang struct {
	done chan struct{}
	// devices are those whose commands wait; none means every command.
	devices []int
}

// Hang wedges every command, or with devices those naming one of them.
// A hang already on is lifted first.
func (w *Wedge) Hang(devices ...int) {
	w.Resume()
	w.cur = &hang{done: make(chan struct{}), devices: slices.Clone(devices)}
}

// Resume lifts the hang: the commands waiting on it are answered, and
// later ones at once.
func (w *Wedge) Resume() {
	if w.cur != nil {
		close(w.cur.done)
		w.cur = nil
	}
}

// Wait blocks a command the fake is wedged for, until ctx ends (its error
// is returned) or Resume. mu is the fake's lock, held by the caller:
// Wait releases it while it blocks, so that other commands and a test's
// look at the fake are not held up.
func (w *Wedge) Wait(ctx context.Context, args []string, mu sync.Locker) error {
	h := w.cur
	if h == nil || !w.applies(h, args) {
		return nil
	}
	mu.Unlock()
	defer mu.Lock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.done:
		return nil
	}
}

func (w *Wedge) applies(h *hang, args []string) bool {
	if len(args) > 0 && args[0] == w.FakeCommand {
		return false
	}
	if len(h.devices) == 0 {
		return true
	}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == w.DeviceFlag {
			d, err := strconv.Atoi(args[i+1])
			return err == nil && slices.Contains(h.devices, d)
		}
	}
	return false
}
