package npusmimock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/hardware/npusmimock"
)

const testdata = "../../drivers/ascend/npusmi/testdata"

var models = []struct {
	model, dir string
	// two are the templates whose vNPUs 100 and 101 the "-two" file holds.
	two [2]string
}{
	{npusmimock.Model910B3, "atlas800t-a2-910b3", [2]string{"vir10_3c_32g", "vir05_1c_16g"}},
	{npusmimock.Model910A, "atlas800-9000-910a", [2]string{"vir16", "vir08"}},
}

func recorded(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newFake(t *testing.T, model string, opts ...npusmimock.Option) *npusmimock.NPUSMI {
	t.Helper()
	n, err := npusmimock.New(model, 8, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func run(t *testing.T, n *npusmimock.NPUSMI, cmd string) (string, int) {
	t.Helper()
	out, err := n.Run(context.Background(), strings.Fields(cmd)...)
	if err == nil {
		return string(out), 0
	}
	var ee *npusmi.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("npu-smi %s: %v", cmd, err)
	}
	return string(out), ee.Code
}

// TestOutputEqualsRecorded compares the fake's output with the recorded
// files: byte for byte where the output follows from the state, parsed
// where the recording holds illustrative readings (temperatures, die ids).
func TestOutputEqualsRecorded(t *testing.T) {
	for _, m := range models {
		t.Run(m.model, func(t *testing.T) {
			n := newFake(t, m.model)
			same := map[string]string{
				"info -l":                     "info-l.txt",
				"info -m":                     "info-m.txt",
				"info -t template-info -i 0":  "template-info.txt",
				"info -t info-vnpu -i 0 -c 0": "info-vnpu-i0-c0-empty.txt",
			}
			for cmd, file := range same {
				if out, code := run(t, n, cmd); code != 0 || out != recorded(t, m.dir, file) {
					t.Errorf("npu-smi %s (exit %d):\n%s\nrecorded %s:\n%s", cmd, code, out, file, recorded(t, m.dir, file))
				}
			}
			for i := 0; i < 8; i++ {
				for _, c := range []struct {
					cmd, file string
					parse     func([]byte) (any, error)
				}{
					{fmt.Sprintf("info -t board -i %d -c 0", i), fmt.Sprintf("board-i%d-c0.txt", i), boardKey},
					{fmt.Sprintf("info -t memory -i %d -c 0", i), fmt.Sprintf("memory-i%d-c0.txt", i),
						func(b []byte) (any, error) { return npusmi.ParseMemory(b) }},
					{fmt.Sprintf("info -t common -i %d", i), fmt.Sprintf("common-i%d.txt", i),
						func(b []byte) (any, error) { return npusmi.ParseCommon(b) }},
				} {
					out, code := run(t, n, c.cmd)
					got, err := c.parse([]byte(out))
					if code != 0 || err != nil {
						t.Fatalf("npu-smi %s: exit %d, %v", c.cmd, code, err)
					}
					want, err := c.parse([]byte(recorded(t, m.dir, c.file)))
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("npu-smi %s parses to %+v, %s to %+v", c.cmd, got, c.file, want)
					}
				}
			}
			out, _ := run(t, n, "info -t board -i 0")
			got, _ := npusmi.ParseBoard([]byte(out))
			want, _ := npusmi.ParseBoard([]byte(recorded(t, m.dir, "board-i0.txt")))
			if !reflect.DeepEqual(keys(got.Fields), keys(want.Fields)) || got.BusID != want.BusID || got.Card != want.Card {
				t.Errorf("card board:\n got %v\nwant %v", got.Fields, want.Fields)
			}

			// Two vNPUs on NPU 0, then destroy one.
			for _, tm := range m.two {
				if out, code := run(t, n, "set -t create-vnpu -i 0 -c 0 -f "+tm); code != 0 || out != recorded(t, m.dir, "create-vnpu-ok.txt") {
					t.Fatalf("create %s (exit %d):\n%s", tm, code, out)
				}
			}
			if out, _ := run(t, n, "info -t info-vnpu -i 0 -c 0"); out != recorded(t, m.dir, "info-vnpu-i0-c0-two.txt") {
				t.Errorf("info-vnpu with two vNPUs:\n%s\nrecorded:\n%s", out, recorded(t, m.dir, "info-vnpu-i0-c0-two.txt"))
			}
			if out, code := run(t, n, "set -t destroy-vnpu -i 0 -c 0 -v 100"); code != 0 || out != recorded(t, m.dir, "destroy-vnpu-100-ok.txt") {
				t.Errorf("destroy (exit %d):\n%s", code, out)
			}
			if out, code := run(t, n, "set -t create-vnpu -i 0 -c 0 -f vir10_3c_16g_m"); code != 215 ||
				out != recorded(t, m.dir, "create-vnpu-unknown-template.txt") {
				t.Errorf("unknown template (exit %d):\n%s", code, out)
			}
		})
	}
}

func boardKey(b []byte) (any, error) {
	bd, err := npusmi.ParseBoard(b)
	if err != nil {
		return nil, err
	}
	return []any{bd.Card, bd.Chip, bd.ChipType, bd.ChipName, bd.BusID, keys(bd.Fields)}, nil
}

func keys(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func TestRefusalsEqualRecorded(t *testing.T) {
	n := newFake(t, npusmimock.Model910B3)
	run(t, n, "set -t create-vnpu -i 0 -c 0 -f vir10_3c_32g")
	run(t, n, "set -t create-vnpu -i 0 -c 0 -f vir05_1c_16g")
	for _, c := range []struct {
		cmd, file string
		code      int
	}{
		{"set -t create-vnpu -i 0 -c 0 -f vir10_3c_32g", "create-vnpu-insufficient-cores.txt", 217},
		{"set -t create-vnpu -i 0 -c 0 -f vir05_1c_16g -v 100", "create-vnpu-failed.txt", 1},
		{"set -t create-vnpu -i 0 -c 0 -f vir16", "create-vnpu-unknown-template.txt", 215},
		{"set -t destroy-vnpu -i 0 -c 0 -v 120", "destroy-vnpu-unknown-id.txt", 215},
	} {
		out, code := run(t, n, c.cmd)
		if code != c.code || out != recorded(t, "atlas800t-a2-910b3", c.file) {
			t.Errorf("npu-smi %s: exit %d, want %d:\n%s", c.cmd, code, c.code, out)
		}
	}
}

func TestClientCycle(t *testing.T) {
	for _, m := range models {
		t.Run(m.model, func(t *testing.T) {
			n := newFake(t, m.model)
			c := &npusmi.Client{Runner: n}
			ctx := context.Background()

			chips, unreadable, err := c.Chips(ctx)
			if err != nil || len(unreadable) != 0 {
				t.Fatal(err, unreadable)
			}
			if len(chips) != 8 {
				t.Fatalf("%d chips", len(chips))
			}
			for i, ch := range chips {
				if ch.Card != i || ch.Chip != 0 || ch.LogicID != i || ch.PhyID != i || ch.Name != m.model ||
					!strings.HasPrefix(ch.BusID, "0000:") || ch.BusID != strings.ToLower(ch.BusID) {
					t.Errorf("chip %d: %+v", i, ch)
				}
			}
			if m.model == npusmimock.Model910B3 && (chips[1].BusID != "0000:c2:00.0" || chips[0].MemoryMB != 65536 || chips[0].AICores != 20) {
				t.Errorf("910B3 chips: %+v", chips)
			}
			if m.model == npusmimock.Model910A && (chips[1].BusID != "0000:81:00.0" || chips[0].MemoryMB != 32768 || chips[0].AICores != 32) {
				t.Errorf("910A chips: %+v", chips)
			}

			ts, err := c.Templates(ctx, 3, 0)
			if err != nil || len(ts) == 0 {
				t.Fatalf("templates: %v, %v", ts, err)
			}

			// Fill every chip with its smallest template, npu-smi picking ids.
			small := ts[0]
			for _, tm := range ts {
				if tm.AICores < small.AICores {
					small = tm
				}
			}
			per := chips[0].AICores / small.AICores
			for _, ch := range chips {
				for k := 0; k < per; k++ {
					v, err := c.CreateVNPU(ctx, ch.Card, ch.Chip, small.Name, -1)
					if err != nil {
						t.Fatalf("NPU %d vNPU %d: %v", ch.Card, k, err)
					}
					if want := ch.PhyID*16 + 100 + k; v.ID != want || v.Template != small.Name {
						t.Errorf("NPU %d: created %+v, want id %d", ch.Card, v, want)
					}
				}
				if _, err := c.CreateVNPU(ctx, ch.Card, ch.Chip, small.Name, -1); err == nil ||
					!strings.Contains(err.Error(), "Insufficient number of cores available, unallocated cores number:0.000000.") {
					t.Errorf("NPU %d over full: %v", ch.Card, err)
				}
			}
			info, err := c.VNPUInfo(ctx, 5, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.VNPUs) != per || info.Resources["AICORE"].Free != 0 || info.Resources["AICORE"].Total != chips[0].AICores {
				t.Errorf("NPU 5: %+v", info)
			}
			// Empty every chip again.
			for _, ch := range chips {
				vs, err := c.VNPUs(ctx, ch.Card, ch.Chip)
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range vs {
					if err := c.DestroyVNPU(ctx, ch.Card, ch.Chip, v.ID); err != nil {
						t.Fatal(err)
					}
				}
				if vs, _ := c.VNPUs(ctx, ch.Card, ch.Chip); len(vs) != 0 {
					t.Errorf("NPU %d still holds %+v", ch.Card, vs)
				}
			}
			after, err := c.VNPUInfo(ctx, 5, 0)
			if err != nil {
				t.Fatal(err)
			}
			initial, err := npusmi.ParseVNPUInfo([]byte(recorded(t, m.dir, "info-vnpu-i0-c0-empty.txt")))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(after.Resources, initial.Resources) {
				t.Errorf("resources after emptying: %+v, want %+v", after.Resources, initial.Resources)
			}

			// With ids of our own.
			big := ts[len(ts)-1]
			v, err := c.CreateVNPU(ctx, 2, 0, big.Name, 2*16+105)
			if err != nil || v.ID != 137 || v.Template != big.Name {
				t.Fatalf("create 137: %+v, %v", v, err)
			}
			if err := c.DestroyVNPU(ctx, 2, 0, 137); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestClientRefusals(t *testing.T) {
	ctx := context.Background()
	n := newFake(t, npusmimock.Model910B3)
	c := &npusmi.Client{Runner: n}

	var ee *npusmi.ExitError
	_, err := c.CreateVNPU(ctx, 0, 0, "vir16", -1)
	if !errors.As(err, &ee) || ee.Code != npusmimock.ExitInvalidParameter || !strings.Contains(err.Error(), "Usage: npu-smi set -t create-vnpu") {
		t.Errorf("unknown template: %v", err)
	}
	if _, err := c.CreateVNPU(ctx, 0, 0, "vir10_3c_32g", 100); err != nil {
		t.Fatal(err)
	}
	// The id is taken on this chip, then on another chip, then out of the chip's range.
	for _, a := range []struct{ card, id int }{{0, 100}, {1, 100}, {0, 116}, {0, 99}} {
		_, err = c.CreateVNPU(ctx, a.card, 0, "vir05_1c_16g", a.id)
		if !errors.As(err, &ee) || ee.Code != npusmimock.ExitDriverRefused || !strings.Contains(err.Error(), "create vnpu failed.") {
			t.Errorf("NPU %d id %d: %v", a.card, a.id, err)
		}
	}
	if _, err := c.CreateVNPU(ctx, 0, 0, "vir10_3c_32g", -1); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateVNPU(ctx, 0, 0, "vir05_1c_16g", -1)
	if !errors.As(err, &ee) || ee.Code != npusmimock.ExitNotSupport || !strings.Contains(err.Error(), "unallocated cores number:0.000000") {
		t.Errorf("cores exhausted: %v", err)
	}
	// Destroying a vNPU the chip does not hold: unknown, and another chip's.
	for _, a := range []struct{ card, id int }{{0, 115}, {1, 100}} {
		err = c.DestroyVNPU(ctx, a.card, 0, a.id)
		if !errors.As(err, &ee) || ee.Code != npusmimock.ExitInvalidParameter || !strings.Contains(err.Error(), "Error parameter of -v.") {
			t.Errorf("destroy NPU %d id %d: %v", a.card, a.id, err)
		}
	}
	if vs, _ := c.VNPUs(ctx, 0, 0); len(vs) != 2 || vs[0].ID != 100 || vs[1].ID != 101 || vs[1].VGroup != 1 {
		t.Errorf("vNPUs: %+v", vs)
	}

	// Less HBM than the templates assume: cores are left, memory is not.
	n = newFake(t, npusmimock.Model910B3, npusmimock.WithHBM(48*1024))
	c = &npusmi.Client{Runner: n}
	if _, err := c.CreateVNPU(ctx, 3, 0, "vir10_3c_32g", -1); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateVNPU(ctx, 3, 0, "vir10_3c_32g", -1)
	if !errors.As(err, &ee) || ee.Code != npusmimock.ExitDriverRefused || !strings.Contains(err.Error(), "create vnpu failed.") {
		t.Errorf("memory exhausted: %v", err)
	}
	if v, err := c.CreateVNPU(ctx, 3, 0, "vir05_1c_16g", -1); err != nil || v.ID != 149 {
		t.Errorf("16 GB left: %+v, %v", v, err)
	}
	info, err := c.VNPUInfo(ctx, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r := info.Resources["Memory"]; r != (npusmi.Resource{Free: 0, Total: 64}) {
		t.Errorf("memory of a 48 GB 910B: %+v", r)
	}
}

func TestCommandsAndErrors(t *testing.T) {
	n := newFake(t, npusmimock.Model910A)
	run(t, n, "info -m")
	run(t, n, "set -t create-vnpu -i 1 -c 0 -f vir04")
	if got, want := n.Commands(), [][]string{{"info", "-m"}, {"set", "-t", "create-vnpu", "-i", "1", "-c", "0", "-f", "vir04"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("commands %v", got)
	}
	n.ResetCommands()
	if len(n.Commands()) != 0 {
		t.Error("commands kept")
	}
	// The 910A has no vGroups and no AI CPU accounting.
	vs, err := (&npusmi.Client{Runner: n}).VNPUs(context.Background(), 1, 0)
	if err != nil || len(vs) != 1 || vs[0].ID != 116 || vs[0].VGroup != -1 {
		t.Errorf("910A vNPUs: %+v, %v", vs, err)
	}
	for _, cmd := range []string{"info -t info-vnpu -i 9 -c 0", "info -t info-vnpu -i 0", "info -t power -i 0", "bogus", "info -x"} {
		if _, code := run(t, n, cmd); code != npusmimock.ExitInvalidParameter {
			t.Errorf("npu-smi %s: exit %d", cmd, code)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Run(ctx, "info", "-m"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := npusmimock.New("310P3", 1); err == nil {
		t.Error("unknown model accepted")
	}
	if _, err := npusmimock.New(npusmimock.Model910B3, 9); err == nil {
		t.Error("9 NPUs accepted")
	}
	small, err := npusmimock.New(npusmimock.Model910B3, 2)
	if err != nil {
		t.Fatal(err)
	}
	chips, unreadable, err := (&npusmi.Client{Runner: small}).Chips(context.Background())
	if err != nil || len(chips) != 2 || len(unreadable) != 0 {
		t.Errorf("2-NPU server: %+v, %v, unreadable %v", chips, err, unreadable)
	}
}
