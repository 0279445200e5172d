package cnmonmock_test

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/hardware/cnmonmock"
)

// The fake does not import the parser it feeds.
func TestFakeDoesNotImportItsParser(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pkg.Imports, "github.com/strata-sh/strata/drivers/cambricon/cnmon") {
		t.Errorf("package cnmonmock imports cnmon: %v", pkg.Imports)
	}
}

// TestContractWithCapture: the card table of a real two-card MLU370-X8
// board (testdata/captures/cnmon-v5.10.22-mlu370-x8.txt, inline ECC on,
// source in the README) and the fake's table of the same board parse to
// the same cards. The versions differ on purpose: the fake is a driver
// with sMLU (5.10.31), and its header's layout is compared with the
// capture's byte for byte in the package's internal tests.
func TestContractWithCapture(t *testing.T) {
	capture, err := os.ReadFile(filepath.Join(testdata, "../captures/cnmon-v5.10.22-mlu370-x8.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := cnmon.ParseSummary(capture)
	if err != nil {
		t.Fatal(err)
	}
	out, code := run(t, newFake(t, 2, cnmonmock.WithECC()), "")
	if code != 0 {
		t.Fatalf("cnmon: exit %d", code)
	}
	got, err := cnmon.ParseSummary([]byte(out))
	if err != nil {
		t.Fatalf("the fake's table does not parse: %v", err)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(cnmon.Summary{}, "Version", "Driver")); diff != "" {
		t.Errorf("cnmon (-capture +fake):\n%s", diff)
	}
}

// A faulty card's health, which no capture shows (see cnmon's Health),
// parses as unhealthy and the others as the recording's; a lost card
// fails every command naming it; a recovered one reads as recorded again.
func TestHealthFaults(t *testing.T) {
	n := newFake(t, 16)
	if err := n.Fault(3, cnmonmock.DeviceFaulty, ""); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, n, "strata-fake lose -c 7"); code != 0 {
		t.Fatalf("lose: %s", out)
	}
	c := &cnmon.Client{Runner: n}
	for card := 0; card < 16; card++ {
		h, err := c.Health(t.Context(), card)
		switch card {
		case 7:
			if err == nil {
				t.Errorf("lost card 7 answered: %+v", h)
			}
		case 3:
			if err != nil || h.Healthy() || h.Device != cnmonmock.DeviceFaulty {
				t.Errorf("faulty card 3: %+v, %v", h, err)
			}
		default:
			if err != nil || !h.Healthy() || !h.Reported {
				t.Errorf("card %d: %+v, %v", card, h, err)
			}
		}
	}
	if _, code := run(t, n, "smlu -c 7 -info"); code == 0 {
		t.Error("lost card 7 answered its sMLU listing")
	}
	for _, cmd := range []string{"strata-fake recover -c 3", "strata-fake recover -c 7"} {
		if out, code := run(t, n, cmd); code != 0 {
			t.Fatalf("%s: %s", cmd, out)
		}
	}
	for _, card := range []string{"3", "7"} {
		if out, _ := run(t, n, "info -c "+card); out != recorded(t, "info-c"+card+".txt") {
			t.Errorf("recovered card %s:\n%s", card, out)
		}
	}
}
