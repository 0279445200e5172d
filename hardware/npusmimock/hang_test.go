package npusmimock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-sh/strata/hardware/npusmimock"
	"github.com/strata-sh/strata/internal/vendortool"
)

// A hung fake does not answer until its caller gives up, which a
// deadline makes a timeout; Hang with NPUs wedges only the commands
// naming them, and the fake's own commands never wedge. Resume answers
// the commands waiting and the later ones.
func TestHang(t *testing.T) {
	n := newFake(t, npusmimock.Model910B3)
	bounded := vendortool.Bounded{Runner: n, Tool: "npu-smi", Timeout: 50 * time.Millisecond}
	ctx := context.Background()

	n.Hang()
	if _, err := bounded.Run(ctx, "info", "-m"); !errors.As(err, new(*vendortool.TimeoutError)) {
		t.Errorf("info -m on a hung fake: %v, want a timeout", err)
	}
	if _, code := run(t, n, "strata-fake recover -i 2"); code != 0 {
		t.Errorf("the fake's own command wedged or failed: exit %d", code)
	}

	n.Hang(3)
	if _, err := bounded.Run(ctx, "info", "-t", "health", "-i", "2", "-c", "0"); err != nil {
		t.Errorf("NPU 2 with NPU 3 hung: %v", err)
	}
	if _, err := bounded.Run(ctx, "info", "-m"); err != nil {
		t.Errorf("info -m with NPU 3 hung: %v", err)
	}
	if _, err := bounded.Run(ctx, "info", "-t", "health", "-i", "3", "-c", "0"); !errors.As(err, new(*vendortool.TimeoutError)) {
		t.Errorf("NPU 3 hung: %v, want a timeout", err)
	}

	answered := make(chan error, 1)
	go func() {
		_, err := n.Run(ctx, "info", "-t", "health", "-i", "3", "-c", "0")
		answered <- err
	}()
	for len(n.Commands()) < 6 {
		time.Sleep(time.Millisecond)
	}
	n.Resume()
	if err := <-answered; err != nil {
		t.Errorf("a command waiting on the hang: %v after Resume", err)
	}
	if _, code := run(t, n, "info -t health -i 3 -c 0"); code != 0 {
		t.Errorf("after Resume: exit %d", code)
	}
	if got := len(n.Commands()); got != 7 {
		t.Errorf("%d commands recorded, want every one, hung or not", got)
	}
}
