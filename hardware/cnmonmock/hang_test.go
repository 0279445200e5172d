package cnmonmock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-sh/strata/internal/vendortool"
)

// A hung fake does not answer until its caller gives up, which a
// deadline makes a timeout; Hang with cards wedges only the commands
// naming them, and the fake's own commands never wedge. Resume answers
// the commands waiting and the later ones.
func TestHang(t *testing.T) {
	n := newFake(t, 8)
	bounded := vendortool.Bounded{Runner: n, Tool: "cnmon", Timeout: 50 * time.Millisecond}
	ctx := context.Background()

	n.Hang()
	if _, err := bounded.Run(ctx); !errors.As(err, new(*vendortool.TimeoutError)) {
		t.Errorf("the card table on a hung fake: %v, want a timeout", err)
	}
	if _, code := run(t, n, "strata-fake recover -c 2"); code != 0 {
		t.Errorf("the fake's own command wedged or failed: exit %d", code)
	}

	n.Hang(3)
	if _, err := bounded.Run(ctx, "info", "-c", "2"); err != nil {
		t.Errorf("card 2 with card 3 hung: %v", err)
	}
	if _, err := bounded.Run(ctx); err != nil {
		t.Errorf("the card table with card 3 hung: %v", err)
	}
	if _, err := bounded.Run(ctx, "info", "-c", "3"); !errors.As(err, new(*vendortool.TimeoutError)) {
		t.Errorf("card 3 hung: %v, want a timeout", err)
	}

	answered := make(chan error, 1)
	go func() {
		_, err := n.Run(ctx, "info", "-c", "3")
		answered <- err
	}()
	for len(n.Commands()) < 6 {
		time.Sleep(time.Millisecond)
	}
	n.Resume()
	if err := <-answered; err != nil {
		t.Errorf("a command waiting on the hang: %v after Resume", err)
	}
	if _, code := run(t, n, "info -c 3"); code != 0 {
		t.Errorf("after Resume: exit %d", code)
	}
	if got := len(n.Commands()); got != 7 {
		t.Errorf("%d commands recorded, want every one, hung or not", got)
	}
}
