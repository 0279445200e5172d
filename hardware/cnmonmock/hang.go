package cnmonmock

import (
	"context"
)

// Hang makes commands wedge, as cnmon does when the driver is stuck in
// the kernel: a command is recorded, then does not answer until its
// caller gives up (its context ends, as at the deadline of
// vendortool.Bounded) or Resume. With no cards every command wedges; with
// cards, those naming one of them with -c. The fake program's own
// "cnmon strata-fake hang DURATION" (hardware/fakebin) wedges every
// command of the program so.
func (n *CNMON) Hang(devices ...int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wedge.Hang(devices...)
}

// Resume ends a Hang: the commands waiting on it are answered, and later
// ones at once.
func (n *CNMON) Resume() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wedge.Resume()
}

// wait blocks a command the fake is wedged for; the caller holds n.mu
// (package wedge).
func (n *CNMON) wait(ctx context.Context, args []string) error {
	return n.wedge.Wait(ctx, args, &n.mu)
}
