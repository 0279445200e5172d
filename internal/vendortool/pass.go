package vendortool

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// A pass is one sweep of a backend over a node's devices that calls the
// tool once or a few times per device: a publish, a health poll round,
// the reading of the devices at start-up. The deadline bounds one call,
// but a wedged tool (a driver stuck in the kernel) does not answer any of
// them, and a pass that waits out the deadline on every device holds the
// plugin's lock for devices × deadline: eight chips at 30s is four
// minutes, past the two minutes after which the plugin counts as hung and
// is restarted. So once a call of a pass has timed out, the tool is taken
// to be wedged for the rest of the pass: the calls after it are not made
// and fail at once with a *SkippedError naming the call that timed out.
// A pass then costs at most one deadline and the calls that answered
// before it. The next pass tries every device again.
//
// The pass travels in the context, so that the clients of the tools
// (npusmi, cnmon), which make several calls per device, skip without
// knowing the pass.

// passKey is the context key of a pass.
type passKey struct{}

// pass records the first call of a pass that timed out.
type pass struct {
	mu       sync.Mutex
	timedOut *TimeoutError
}

// NewPass returns a context that starts a pass: Call skips every call
// made with it, or with a context derived from it, once one such call
// has timed out. A pass inside ctx's own, if any, is a new one.
func NewPass(ctx context.Context) context.Context {
	return context.WithValue(ctx, passKey{}, &pass{})
}

// SkippedError reports a call that its pass did not make: an earlier
// call of the pass timed out, and the tool is taken to be wedged until
// the next pass.
type SkippedError struct {
	// TimedOut is the call of the pass that timed out.
	TimedOut *TimeoutError
}

func (e *SkippedError) Error() string {
	return fmt.Sprintf("%s timed out after %s; not queried in this pass", e.TimedOut.command(), e.TimedOut.Timeout)
}

// Call runs a command through r as part of ctx's pass (see NewPass): it
// fails at once with a *SkippedError when a call of the pass has timed
// out, and otherwise runs it and notes a *TimeoutError it fails with.
// Without a pass it is r.Run.
func Call(ctx context.Context, r Runner, args ...string) ([]byte, error) {
	p, _ := ctx.Value(passKey{}).(*pass)
	if p == nil {
		return r.Run(ctx, args...)
	}
	p.mu.Lock()
	te := p.timedOut
	p.mu.Unlock()
	if te != nil {
		return nil, &SkippedError{TimedOut: te}
	}
	out, err := r.Run(ctx, args...)
	if errors.As(err, &te) {
		p.mu.Lock()
		if p.timedOut == nil {
			p.timedOut = te
		}
		p.mu.Unlock()
	}
	return out, err
}
