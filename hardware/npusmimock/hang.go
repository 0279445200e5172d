package npusmimock

import (
	"context"
	"slices"
	"strconv"
)

// wedge is a hang of the fake: the commands it applies to wait until
// done is closed.
type wedge struct {
	done chan struct{}
	// cards are the NPUs whose commands wait; none means every command.
	cards []int
}

// applies says whether a command line waits on the wedge: the fake's own
// commands never do, as the fake program's do not.
func (w *wedge) applies(args []string) bool {
	if len(args) > 0 && args[0] == FakeCommand {
		return false
	}
	if len(w.cards) == 0 {
		return true
	}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-i" {
			card, err := strconv.Atoi(args[i+1])
			return err == nil && slices.Contains(w.cards, card)
		}
	}
	return false
}

// Hang makes commands wedge, as npu-smi does when the driver is stuck in
// the kernel: a command is recorded, then does not answer until its
// caller gives up (its context ends, as at the deadline of
// vendortool.Bounded) or Resume. With no cards every command wedges; with
// cards, those naming one of them with -i. The fake program's own
// "npu-smi strata-fake hang DURATION" (hardware/fakebin) wedges every
// command of the program so.
func (n *NPUSMI) Hang(cards ...int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.wedge != nil {
		close(n.wedge.done)
	}
	n.wedge = &wedge{done: make(chan struct{}), cards: append([]int(nil), cards...)}
}

// Resume ends a Hang: the commands waiting on it are answered, and later
// ones at once.
func (n *NPUSMI) Resume() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.wedge != nil {
		close(n.wedge.done)
		n.wedge = nil
	}
}

// wait blocks a command the fake is wedged for. The caller holds n.mu,
// which wait releases while it blocks, so that other commands and the
// test's look at the fake are not held up.
func (n *NPUSMI) wait(ctx context.Context, args []string) error {
	w := n.wedge
	if w == nil || !w.applies(args) {
		return nil
	}
	n.mu.Unlock()
	defer n.mu.Lock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return nil
	}
}
