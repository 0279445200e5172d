package cnmonmock

import (
	"fmt"
	"strconv"
)

// FakeCommand starts the command lines that only the fake knows, with
// which a test (or the fake cnmon program, whose state keeps them) breaks
// a card and mends it:
//
//	cnmon strata-fake fault -c N DEVICE [DRIVER]   Health State of card N
//	cnmon strata-fake lose -c N                    every command on card N fails
//	cnmon strata-fake ignore-switch -c N           sMLU mode switches on card N do nothing
//	cnmon strata-fake recover -c N                 healthy again, switches work
const FakeCommand = "strata-fake"

// health is the Health State section of cnmon info for a card.
type health struct {
	device, driver string
	// lost makes every command naming the card fail, as a card fallen
	// off the bus does.
	lost bool
}

// healthGood is a working card as cnmon info prints it ("Good",
// "Running": see the testdata README for their source).
var healthGood = health{device: "Good", driver: "Running"}

// DeviceFaulty is what the fake prints as a faulty card's Device state.
// No capture of a faulty card's cnmon info is public; the word is the
// fake's own, and the plugin takes any state but Good as faulty.
const DeviceFaulty = "Bad"

// Fault makes card report device as its Health State/Device (and driver,
// if not empty, as its Driver state) in cnmon info.
func (n *CNMON) Fault(card int, device, driver string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if driver == "" {
		driver = healthGood.driver
	}
	return codeErr(n.setHealth(card, health{device: device, driver: driver}))
}

// Lose makes every command naming card fail until Recover.
func (n *CNMON) Lose(card int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := healthGood
	h.lost = true
	return codeErr(n.setHealth(card, h))
}

// Recover makes card healthy again, and its sMLU mode switches work
// again.
func (n *CNMON) Recover(card int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return codeErr(n.recover(card))
}

// IgnoreModeSwitches makes "cnmon set -c card -smlu on|off" report
// success and leave the card's sMLU mode as it is, until Recover. Neither
// cnmon's documentation nor any public capture says whether cnmon can
// report a switch it did not make, nor how it would look; NVML documents
// such a switch for MIG mode (left pending while the GPU is in use). This
// is the fake's choice of the case a plugin must not trust the exit
// status in: the usual success message, and no change.
func (n *CNMON) IgnoreModeSwitches(card int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return codeErr(n.ignoreSwitches(card))
}

func (n *CNMON) ignoreSwitches(card int) (string, int) {
	if card < 0 || card >= len(n.cards) {
		return notExisted(card)
	}
	n.cards[card].ignoreSwitch = true
	return "", 0
}

func (n *CNMON) recover(card int) (string, int) {
	if out, code := n.setHealth(card, healthGood); code != 0 {
		return out, code
	}
	n.cards[card].ignoreSwitch = false
	return "", 0
}

func codeErr(out string, code int) error {
	if code != 0 {
		return fmt.Errorf("%s", out)
	}
	return nil
}

func (n *CNMON) setHealth(card int, h health) (string, int) {
	if card < 0 || card >= len(n.cards) {
		return notExisted(card)
	}
	n.cards[card].health = h
	return "", 0
}

// fakeCommand runs a FakeCommand line.
func (n *CNMON) fakeCommand(args []string) (string, int) {
	if len(args) < 3 || args[1] != "-c" {
		return fakeError("usage: %s fault|lose|ignore-switch|recover -c N [DEVICE [DRIVER]]", FakeCommand)
	}
	card, err := strconv.Atoi(args[2])
	if err != nil {
		return fakeError("card %q is not an index", args[2])
	}
	switch {
	case args[0] == "fault" && (len(args) == 4 || len(args) == 5):
		h := health{device: args[3], driver: healthGood.driver}
		if len(args) == 5 {
			h.driver = args[4]
		}
		return n.setHealth(card, h)
	case args[0] == "lose" && len(args) == 3:
		h := healthGood
		h.lost = true
		return n.setHealth(card, h)
	case args[0] == "ignore-switch" && len(args) == 3:
		return n.ignoreSwitches(card)
	case args[0] == "recover" && len(args) == 3:
		return n.recover(card)
	}
	return fakeError("usage: %s fault|lose|ignore-switch|recover -c N [DEVICE [DRIVER]]", FakeCommand)
}

// lostOutput is what the fake prints for a command on a lost card.
// cnmon's wording for a card that does not answer is not public.
func lostOutput(card int) (string, int) {
	return fmt.Sprintf("cnmonmock: card %d does not answer\n", card), ExitFailure
}
