package npusmi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// replay answers commands from recorded files.
type replay struct {
	t     *testing.T
	dir   string
	files map[string]string
	codes map[string]int
	ran   []string
}

func (r *replay) Run(_ context.Context, args ...string) ([]byte, error) {
	cmd := strings.Join(args, " ")
	r.ran = append(r.ran, cmd)
	name, ok := r.files[cmd]
	if !ok {
		r.t.Fatalf("unexpected command npu-smi %s", cmd)
	}
	out := read(r.t, r.dir, name)
	if code := r.codes[cmd]; code != 0 {
		return out, &ExitError{Tool: tool, Args: args, Code: code}
	}
	return out, nil
}

// recorded maps the Chips queries of a server onto its recorded files.
func recorded(t *testing.T, dir string) *replay {
	r := &replay{t: t, dir: dir, files: map[string]string{"info -m": "info-m.txt"}, codes: map[string]int{}}
	for i := 0; i < 8; i++ {
		n := itoa(i)
		r.files["info -t common -i "+n] = "common-i" + n + ".txt"
		r.files["info -t board -i "+n+" -c 0"] = "board-i" + n + "-c0.txt"
		r.files["info -t memory -i "+n+" -c 0"] = "memory-i" + n + "-c0.txt"
	}
	r.files["info -t template-info -i 0"] = "template-info.txt"
	return r
}

func TestChipsFromRecordedOutput(t *testing.T) {
	for _, m := range machines {
		r := recorded(t, m.dir)
		chips, unreadable, err := (&Client{Runner: r}).Chips(context.Background())
		if err != nil || len(unreadable) != 0 {
			t.Fatalf("%s: %v, unreadable %v", m.dir, err, unreadable)
		}
		var want []Chip
		for i := 0; i < 8; i++ {
			want = append(want, Chip{Card: i, Chip: 0, LogicID: i, PhyID: i, Name: m.name,
				BusID: m.busIDs[i], MemoryMB: m.hbmMB, AICores: m.aiCores})
		}
		if !reflect.DeepEqual(chips, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", m.dir, chips, want)
		}
		if len(r.ran) != 1+3*8 {
			t.Errorf("%s: ran %d commands: %v", m.dir, len(r.ran), r.ran)
		}
	}
}

// A chip whose own queries fail is left out with its error, the others
// are listed; a failing info -m fails the listing.
func TestChipsLeaveOutAChipThatDoesNotAnswer(t *testing.T) {
	for name, tc := range map[string]struct {
		failing    string
		unreadable []int
	}{
		"board":   {"info -t board -i 3 -c 0", []int{3}},
		"memory":  {"info -t memory -i 5 -c 0", []int{5}},
		"common":  {"info -t common -i 6", []int{6}},
		"info -m": {failing: "info -m"},
	} {
		t.Run(name, func(t *testing.T) {
			r := recorded(t, dir910B3)
			r.codes[tc.failing] = 217
			chips, unreadable, err := (&Client{Runner: r}).Chips(context.Background())
			if tc.unreadable == nil {
				if err == nil || !strings.Contains(err.Error(), "info -m") {
					t.Errorf("listing: %v, want the failure of info -m", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, u := range unreadable {
				got = append(got, u.Card)
				var ee *ExitError
				if !errors.As(u, &ee) || ee.Code != 217 || !strings.Contains(u.Error(), fmt.Sprintf("NPU %d chip 0: ", u.Card)) {
					t.Errorf("unreadable chip: %v", u)
				}
			}
			if !reflect.DeepEqual(got, tc.unreadable) || len(chips) != 8-len(tc.unreadable) {
				t.Errorf("unreadable %v and %d chips, want %v and the other %d", got, len(chips), tc.unreadable, 8-len(tc.unreadable))
			}
			for _, ch := range chips {
				if ch.Card == tc.unreadable[0] {
					t.Errorf("unreadable NPU %d listed: %+v", ch.Card, ch)
				}
			}
		})
	}
}

func TestTemplatesFromRecordedOutput(t *testing.T) {
	r := recorded(t, dir910B3)
	ts, err := (&Client{Runner: r}).Templates(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != "vir10_3c_32g" || ts[1].MemoryMB != 16384 {
		t.Errorf("got %+v", ts)
	}
}

func TestCreateAndDestroyFromRecordedOutput(t *testing.T) {
	// With an id: create, then list to find it.
	r := &replay{t: t, dir: dir910B3, codes: map[string]int{}, files: map[string]string{
		"set -t create-vnpu -i 0 -c 0 -f vir05_1c_16g -v 101": "create-vnpu-ok.txt",
		"info -t info-vnpu -i 0 -c 0":                         "info-vnpu-i0-c0-two.txt",
		"set -t destroy-vnpu -i 0 -c 0 -v 100":                "destroy-vnpu-100-ok.txt",
		"set -t create-vnpu -i 0 -c 0 -f vir10_3c_32g":        "create-vnpu-insufficient-cores.txt",
		"set -t destroy-vnpu -i 0 -c 0 -v 120":                "destroy-vnpu-unknown-id.txt",
		"set -t create-vnpu -i 0 -c 0 -f vir10_3c_32g -v 100": "create-vnpu-failed.txt",
		"set -t destroy-vnpu -i 0 -c 0 -v 101":                "destroy-vnpu-100-ok.txt",
	}}
	r.codes["set -t create-vnpu -i 0 -c 0 -f vir10_3c_32g"] = 217
	r.codes["set -t destroy-vnpu -i 0 -c 0 -v 120"] = 215
	r.codes["set -t create-vnpu -i 0 -c 0 -f vir10_3c_32g -v 100"] = 1
	c := &Client{Runner: r}
	ctx := context.Background()

	v, err := c.CreateVNPU(ctx, 0, 0, "vir05_1c_16g", 101)
	if err != nil {
		t.Fatal(err)
	}
	if v != (VNPU{ID: 101, Template: "vir05_1c_16g", VGroup: 1, ContainerID: "000000000000"}) {
		t.Errorf("created %+v", v)
	}
	if err := c.DestroyVNPU(ctx, 0, 0, 100); err != nil {
		t.Fatal(err)
	}

	// Refusals carry npu-smi's message and exit status.
	_, err = c.CreateVNPU(ctx, 0, 0, "vir10_3c_32g", 100)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(err.Error(), "create vnpu failed.") {
		t.Errorf("create with an id in use: %v", err)
	}
	err = c.DestroyVNPU(ctx, 0, 0, 120)
	if !errors.As(err, &ee) || ee.ExitCode() != 215 || !strings.Contains(err.Error(), "Error parameter of -v.") {
		t.Errorf("destroy unknown: %v", err)
	}
	// The destroy output names another id than asked for.
	if err := c.DestroyVNPU(ctx, 0, 0, 101); err == nil || !strings.Contains(err.Error(), "destroyed vNPU 100") {
		t.Errorf("mismatched destroy: %v", err)
	}
}

func TestCreateVNPUPicksNewID(t *testing.T) {
	// Without an id the vNPU is found by listing before and after.
	r := &replay{t: t, dir: dir910B3, codes: map[string]int{}, files: map[string]string{
		"set -t create-vnpu -i 0 -c 0 -f vir05_1c_16g": "create-vnpu-ok.txt",
	}}
	lists := []string{"info-vnpu-i0-c0-empty.txt", "info-vnpu-i0-c0-two.txt"}
	runner := runnerFunc(func(ctx context.Context, args ...string) ([]byte, error) {
		if strings.Join(args, " ") == "info -t info-vnpu -i 0 -c 0" {
			f := lists[0]
			lists = lists[1:]
			return read(t, dir910B3, f), nil
		}
		return r.Run(ctx, args...)
	})
	// Two vNPUs appeared: ambiguous.
	if _, err := (&Client{Runner: runner}).CreateVNPU(context.Background(), 0, 0, "vir05_1c_16g", -1); err == nil ||
		!strings.Contains(err.Error(), "2 new vNPUs") {
		t.Errorf("ambiguous creation: %v", err)
	}
	// One vNPU appeared.
	only := strings.Replace(string(read(t, dir910B3, "info-vnpu-i0-c0-two.txt")),
		"|  100      |  0             |  000000000000  |  0       |  vir10_3c_32g        |\n+-------------------------------------------------------------------------------+\n", "", 1)
	only = strings.Replace(only, "| Total number of vnpu: 2 ", "| Total number of vnpu: 1 ", 1)
	lists = nil
	calls := 0
	runner = runnerFunc(func(ctx context.Context, args ...string) ([]byte, error) {
		if strings.Join(args, " ") == "info -t info-vnpu -i 0 -c 0" {
			calls++
			if calls == 1 {
				return read(t, dir910B3, "info-vnpu-i0-c0-empty.txt"), nil
			}
			return []byte(only), nil
		}
		return r.Run(ctx, args...)
	})
	v, err := (&Client{Runner: runner}).CreateVNPU(context.Background(), 0, 0, "vir05_1c_16g", -1)
	if err != nil || v.ID != 101 || v.VGroup != 1 {
		t.Errorf("got %+v, %v", v, err)
	}
}

type runnerFunc func(ctx context.Context, args ...string) ([]byte, error)

func (f runnerFunc) Run(ctx context.Context, args ...string) ([]byte, error) { return f(ctx, args...) }

func TestExec(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "npu-smi")
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = fail ]; then echo 'create vnpu failed.'; echo 'dcmi error' >&2; exit 215; fi\n" +
		"echo \"args: $*\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := Exec{Binary: bin}
	out, err := e.Run(context.Background(), "info", "-m")
	if err != nil || string(out) != "args: info -m\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	out, err = e.Run(context.Background(), "fail")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 215 || ee.Stderr != "dcmi error" || string(out) != "create vnpu failed.\n" {
		t.Fatalf("got %q, %#v", out, err)
	}
	if !strings.Contains(err.Error(), "exit status 215: dcmi error") {
		t.Errorf("error text %q", err)
	}
	if _, err := (Exec{Binary: filepath.Join(dir, "missing")}).Run(context.Background()); !errors.As(err, &ee) || ee.Code != -1 {
		t.Errorf("missing binary: %v", err)
	}
}
