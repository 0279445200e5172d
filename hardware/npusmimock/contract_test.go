package npusmimock_test

import (
	"fmt"
	"go/build"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/hardware/npusmimock"
)

// The fake does not import the parser it feeds.
func TestFakeDoesNotImportItsParser(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pkg.Imports, "github.com/strata-sh/strata/drivers/ascend/npusmi") {
		t.Errorf("package npusmimock imports npusmi: %v", pkg.Imports)
	}
}

// parsers are npusmi's parsers of every command the plugin runs, reduced
// to what the plugin reads of them.
var parsers = map[string]func([]byte) (any, error){
	"info -m":  func(b []byte) (any, error) { return npusmi.ParseMapping(b) },
	"info -l":  func(b []byte) (any, error) { return npusmi.ParseList(b) },
	"common":   func(b []byte) (any, error) { return npusmi.ParseCommon(b) },
	"memory":   func(b []byte) (any, error) { return npusmi.ParseMemory(b) },
	"template": func(b []byte) (any, error) { return npusmi.ParseTemplates(b) },
	"vnpu":     func(b []byte) (any, error) { return npusmi.ParseVNPUInfo(b) },
	"create":   func(b []byte) (any, error) { return npusmi.ParseCreateVNPU(b) },
	"destroy":  func(b []byte) (any, error) { return npusmi.ParseDestroyVNPU(b) },
	"health":   func(b []byte) (any, error) { return npusmi.ParseHealth(b) },
	// The board's die ids, serial numbers and versions are illustrative
	// in the recordings; the plugin reads the numbering, name and bus.
	"board": func(b []byte) (any, error) {
		bd, err := npusmi.ParseBoard(b)
		return []any{bd.Card, bd.Chip, bd.ChipType, bd.ChipName, bd.BusID}, err
	},
}

// TestContractWithRecordedOutputs: for each command the plugin runs, the
// fake's output parsed by the real parser equals the recorded output
// parsed by it (testdata/README.md says where each recording comes from).
func TestContractWithRecordedOutputs(t *testing.T) {
	for _, m := range models {
		t.Run(m.model, func(t *testing.T) {
			n := newFake(t, m.model)
			type step struct{ cmd, parser, file string }
			steps := []step{
				{"info -m", "info -m", "info-m.txt"},
				{"info -l", "info -l", "info-l.txt"},
				{"info -t template-info -i 0", "template", "template-info.txt"},
				{"info -t info-vnpu -i 0 -c 0", "vnpu", "info-vnpu-i0-c0-empty.txt"},
				{"info -t health -i 0 -c 0", "health", "../health-ok.txt"},
			}
			for i := 0; i < 8; i++ {
				steps = append(steps,
					step{fmt.Sprintf("info -t common -i %d", i), "common", fmt.Sprintf("common-i%d.txt", i)},
					step{fmt.Sprintf("info -t board -i %d -c 0", i), "board", fmt.Sprintf("board-i%d-c0.txt", i)},
					step{fmt.Sprintf("info -t memory -i %d -c 0", i), "memory", fmt.Sprintf("memory-i%d-c0.txt", i)})
			}
			for _, tm := range m.two {
				steps = append(steps, step{"set -t create-vnpu -i 0 -c 0 -f " + tm, "create", "create-vnpu-ok.txt"})
			}
			steps = append(steps,
				step{"info -t info-vnpu -i 0 -c 0", "vnpu", "info-vnpu-i0-c0-two.txt"},
				step{"set -t destroy-vnpu -i 0 -c 0 -v 100", "destroy", "destroy-vnpu-100-ok.txt"})
			for _, s := range steps {
				out, code := run(t, n, s.cmd)
				if code != 0 {
					t.Fatalf("npu-smi %s: exit %d:\n%s", s.cmd, code, out)
				}
				got, err := parsers[s.parser]([]byte(out))
				if err != nil {
					t.Fatalf("npu-smi %s: the fake's output does not parse: %v", s.cmd, err)
				}
				want, err := parsers[s.parser]([]byte(recorded(t, m.dir, s.file)))
				if err != nil {
					t.Fatalf("%s: %v", s.file, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("npu-smi %s against %s (-recorded +fake):\n%s", s.cmd, s.file, diff)
				}
			}
		})
	}
}

// A faulty chip's health, which no capture shows (see the testdata
// README), parses to what the fake was told; the others stay healthy; a
// lost chip fails every command naming it; and a recovered chip reads as
// the recording again.
func TestHealthFaults(t *testing.T) {
	n := newFake(t, npusmimock.Model910B3)
	if err := n.Fault(2, npusmi.HealthAlarm, "80E01801", "80C98009"); err != nil {
		t.Fatal(err)
	}
	if err := n.Lose(5); err != nil {
		t.Fatal(err)
	}
	for card := 0; card < 8; card++ {
		out, code := run(t, n, fmt.Sprintf("info -t health -i %d -c 0", card))
		switch card {
		case 5:
			if code == 0 {
				t.Errorf("lost NPU 5 answered:\n%s", out)
			}
			if _, code := run(t, n, "info -t info-vnpu -i 5 -c 0"); code == 0 {
				t.Errorf("lost NPU 5 answered info-vnpu")
			}
			continue
		case 2:
			h, err := npusmi.ParseHealth([]byte(out))
			want := npusmi.Health{Status: npusmi.HealthAlarm, ErrorCodes: []string{"80E01801", "80C98009"}}
			if err != nil || h.Healthy() || !cmp.Equal(want, h) {
				t.Errorf("faulty NPU 2: %+v, %v", h, err)
			}
		default:
			if out != recorded(t, "", "health-ok.txt") {
				t.Errorf("NPU %d:\n%s", card, out)
			}
		}
	}
	for _, cmd := range []string{"strata-fake recover -i 2", "strata-fake recover -i 5"} {
		if out, code := run(t, n, cmd); code != 0 {
			t.Fatalf("%s: exit %d: %s", cmd, code, out)
		}
	}
	for _, card := range []int{2, 5} {
		if out, _ := run(t, n, fmt.Sprintf("info -t health -i %d -c 0", card)); out != recorded(t, "", "health-ok.txt") {
			t.Errorf("recovered NPU %d:\n%s", card, out)
		}
	}
	if _, code := run(t, n, "strata-fake fault -i 9 Alarm"); code == 0 {
		t.Error("a fault on an NPU the server lacks was taken")
	}
}
