package npusmimock

import (
	"fmt"
	"strconv"
	"strings"
)

// FakeCommand starts the command lines that only the fake knows, with
// which a test (or the fake npu-smi program, whose state keeps them)
// breaks a chip and mends it:
//
//	npu-smi strata-fake fault -i N STATE [CODE...]   Health Status STATE, its codes
//	npu-smi strata-fake lose -i N                    every command on NPU N fails
//	npu-smi strata-fake recover -i N                 healthy again
const FakeCommand = "strata-fake"

// health is what info -t health reports of a chip.
type health struct {
	status string
	codes  []string
	// lost makes every command naming the chip fail, as a chip fallen
	// off the bus does.
	lost bool
}

// Fault makes NPU card's chip report state (Warning, Alarm, Critical) and
// the given fault codes in npu-smi info -t health.
func (n *NPUSMI) Fault(card int, state string, codes ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, code := n.setHealth(card, health{status: state, codes: codes})
	if code != 0 {
		return fmt.Errorf("npusmimock: no NPU %d", card)
	}
	return nil
}

// Lose makes every command naming NPU card fail until Recover.
func (n *NPUSMI) Lose(card int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, code := n.setHealth(card, health{status: "OK", lost: true}); code != 0 {
		return fmt.Errorf("npusmimock: no NPU %d", card)
	}
	return nil
}

// Recover makes NPU card healthy again.
func (n *NPUSMI) Recover(card int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, code := n.setHealth(card, health{status: "OK"}); code != 0 {
		return fmt.Errorf("npusmimock: no NPU %d", card)
	}
	return nil
}

func (n *NPUSMI) setHealth(card int, h health) (string, int) {
	for _, c := range n.chips {
		if c.card == card {
			c.health = h
			return "", 0
		}
	}
	return fakeError("no NPU %d", card)
}

// fakeCommand runs a FakeCommand line.
func (n *NPUSMI) fakeCommand(args []string) (string, int) {
	if len(args) < 3 || args[1] != "-i" {
		return fakeError("usage: %s fault|lose|recover -i N [STATE CODE...]", FakeCommand)
	}
	card, err := strconv.Atoi(args[2])
	if err != nil {
		return fakeError("NPU %q is not a number", args[2])
	}
	switch {
	case args[0] == "fault" && len(args) >= 4:
		return n.setHealth(card, health{status: args[3], codes: append([]string(nil), args[4:]...)})
	case args[0] == "lose" && len(args) == 3:
		return n.setHealth(card, health{status: "OK", lost: true})
	case args[0] == "recover" && len(args) == 3:
		return n.setHealth(card, health{status: "OK"})
	}
	return fakeError("usage: %s fault|lose|recover -i N [STATE CODE...]", FakeCommand)
}

// healthInfo prints info -t health for a chip in npu-smi's key/value
// layout. The healthy output is the one Huawei's documentation shows;
// a faulty chip's fields follow Huawei's command reference, as no capture
// of one is public: the state, the codes separated by spaces, and NA for
// the description (the fake knows no fault's text).
func (n *NPUSMI) healthInfo(c *chip, _ bool) (string, int) {
	h := c.health
	codes := "NA"
	if len(h.codes) > 0 {
		codes = strings.Join(h.codes, " ")
	}
	var b strings.Builder
	kv(&b, "Health Status", h.status)
	kv(&b, "Error Code", codes)
	kv(&b, "Error Information", "NA")
	return b.String(), 0
}

// lostOutput is what the fake prints for a command on a lost chip.
// npu-smi's wording for a chip that does not answer is not public.
func lostOutput(card int) (string, int) {
	return fmt.Sprintf("npusmimock: NPU %d does not answer\n", card), ExitNotSupport
}
