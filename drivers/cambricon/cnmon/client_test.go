package cnmon

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
		r.t.Fatalf("unexpected command cnmon %s", cmd)
	}
	out := read(r.t, r.dir, name)
	if code := r.codes[cmd]; code != 0 {
		return out, &ExitError{Tool: tool, Args: args, Code: code}
	}
	return out, nil
}

func recorded(t *testing.T) *replay {
	r := &replay{t: t, dir: dirX8, files: map[string]string{"": "cnmon.txt"}, codes: map[string]int{}}
	for i := 0; i < 16; i++ {
		r.files["info -c "+itoa(i)] = "info-c" + itoa(i) + ".txt"
	}
	return r
}

func TestCardsFromRecordedOutput(t *testing.T) {
	r := recorded(t)
	cards, unreadable, err := (&Client{Runner: r}).Cards(context.Background())
	if err != nil || len(unreadable) != 0 {
		t.Fatal(err, unreadable)
	}
	var want []Card
	for i := 0; i < 16; i++ {
		want = append(want, Card{Index: i, Name: "MLU370-X8", Family: "MLU370", Firmware: "v1.1.6", Driver: "v5.10.31",
			BusID: x8BusIDs[i], MemoryMB: 23374, MLUClusters: 4, MLUCores: 16, UUID: x8UUID(i),
			Mode: "FULL", ComputeMode: "Default"})
	}
	if !reflect.DeepEqual(cards, want) {
		t.Errorf("got  %+v\nwant %+v", cards, want)
	}
	if len(r.ran) != 17 || r.ran[0] != "" || r.ran[16] != "info -c 15" {
		t.Errorf("ran %q", r.ran)
	}
}

// A card whose cnmon info fails or disagrees with the table is left out
// with its error, the others are listed; a failing table fails the
// listing.
func TestCardsLeaveOutACardThatCannotBeRead(t *testing.T) {
	// cnmon info -c 1 answering for another bus than the table.
	dir := t.TempDir()
	for _, f := range slices.Collect(maps.Values(recorded(t).files)) {
		b := read(t, dirX8, f)
		if f == "info-c1.txt" {
			b = []byte(strings.Replace(string(b), "Bus num                    : 16", "Bus num                    : 17", 1))
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		edit       func(*replay)
		unreadable int
		why        string
	}{
		"disagreeing": {func(r *replay) { r.dir = dir }, 1, "0000:17:00.0"},
		"failing":     {func(r *replay) { r.codes["info -c 4"] = 1 }, 4, "exit status 1"},
		"table":       {func(r *replay) { r.codes[""] = 1 }, -1, "exit status 1"},
	} {
		t.Run(name, func(t *testing.T) {
			r := recorded(t)
			tc.edit(r)
			cards, unreadable, err := (&Client{Runner: r}).Cards(context.Background())
			if tc.unreadable < 0 {
				if err == nil || !strings.Contains(err.Error(), tc.why) || cards != nil {
					t.Errorf("got %v, %v, want the table's failure", cards, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(unreadable) != 1 || unreadable[0].Card != tc.unreadable || !strings.Contains(unreadable[0].Error(), tc.why) {
				t.Errorf("unreadable %v, want card %d: %s", unreadable, tc.unreadable, tc.why)
			}
			if len(cards) != 15 || slices.ContainsFunc(cards, func(c Card) bool { return c.Index == tc.unreadable }) {
				t.Errorf("%d cards, want the other 15", len(cards))
			}
		})
	}
}

func smluReplay(t *testing.T) *replay {
	r := &replay{t: t, dir: dirX8, codes: map[string]int{}, files: map[string]string{
		"smlu -c 0 -create -mlu 25 -mem 5843":  "smlu-create-ok.txt",
		"smlu -c 0 -info":                      "smlu-info-c0-two.txt",
		"smlu -c 0 -destroy 1":                 "smlu-destroy-1-ok.txt",
		"smlu -c 0 -destroy 2":                 "smlu-destroy-1-ok.txt",
		"smlu -c 0 -destroy 7":                 "smlu-destroy-unknown.txt",
		"smlu -c 0 -create -mlu 50 -mem 1024":  "smlu-create-insufficient-quota.txt",
		"smlu -c 0 -create -mlu 10 -mem 12000": "smlu-create-insufficient-memory.txt",
		"smlu -c 0 -create -mlu 50 -mem 8192":  "smlu-create-ok.txt",
		"set -c 0 -smlu on":                    "set-smlu-on-c0.txt",
		"set -c 0 -smlu off":                   "set-smlu-off-busy.txt",
		"info -c 16":                           "info-c16-not-existed.txt",
	}}
	for _, c := range []string{"smlu -c 0 -destroy 7", "smlu -c 0 -create -mlu 50 -mem 1024",
		"smlu -c 0 -create -mlu 10 -mem 12000", "set -c 0 -smlu off"} {
		r.codes[c] = 1
	}
	return r
}

func TestSMLUFromRecordedOutput(t *testing.T) {
	r := smluReplay(t)
	c := &Client{Runner: r}
	ctx := context.Background()

	if err := c.SetSMLUMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSMLU(ctx, 0, 25, 5843)
	if err != nil {
		t.Fatal(err)
	}
	want := SMLU{Card: 0, ID: 1, ProfileID: 2, ProfileName: "25p.5843mb", UUID: "89033010-2354-0000-0001-000000000000",
		DeviceNode: "/dev/cambricon-caps/cap_dev0_mi1", VCorePercent: 25, MemoryMB: 5843}
	if s != want {
		t.Errorf("created %+v", s)
	}
	if r.ran[1] != "smlu -c 0 -create -mlu 25 -mem 5843" || r.ran[2] != "smlu -c 0 -info" {
		t.Errorf("ran %q", r.ran)
	}
	vs, err := c.SMLUs(ctx, 0)
	if err != nil || len(vs) != 2 || vs[1].ID != 2 {
		t.Errorf("listed %+v, %v", vs, err)
	}
	if err := c.DestroySMLU(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}

	// Refusals carry cnmon's message and exit status.
	var ee *ExitError
	for _, a := range []struct {
		pct  int
		mem  int64
		text string
	}{{50, 1024, "insufficient MLU quota"}, {10, 12000, "insufficient memory"}} {
		_, err = c.CreateSMLU(ctx, 0, a.pct, a.mem)
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(err.Error(), a.text) {
			t.Errorf("create %d%% %d MiB: %v", a.pct, a.mem, err)
		}
	}
	err = c.DestroySMLU(ctx, 0, 7)
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "instance not found") {
		t.Errorf("destroy unknown: %v", err)
	}
	if err := c.SetSMLUMode(ctx, 0, false); err == nil || !strings.Contains(err.Error(), "Must destroy all instances") {
		t.Errorf("set off: %v", err)
	}
	// The destroy output names another instance than asked for.
	if err := c.DestroySMLU(ctx, 0, 2); err == nil || !strings.Contains(err.Error(), "destroyed sMLU instance 1") {
		t.Errorf("mismatched destroy: %v", err)
	}
	// The create reports instance 1, which the listing holds with other resources.
	if _, err := c.CreateSMLU(ctx, 0, 50, 8192); err == nil || !strings.Contains(err.Error(), "has 25% and 5843 MiB") {
		t.Errorf("mismatched create: %v", err)
	}
	// Arguments the driver would refuse are refused before running cnmon.
	n := len(r.ran)
	for _, a := range [][2]int{{0, 1024}, {101, 1024}, {10, 0}} {
		if _, err := c.CreateSMLU(ctx, 0, a[0], int64(a[1])); err == nil {
			t.Errorf("create %v accepted", a)
		}
	}
	if len(r.ran) != n {
		t.Errorf("invalid creations ran cnmon: %q", r.ran[n:])
	}
	// A card cnmon does not have.
	if _, err := c.Info(ctx, 16); err == nil || !strings.Contains(err.Error(), "Card 16 is not existed") {
		t.Errorf("info of card 16: %v", err)
	}
}

func TestNotExistedWithExitZero(t *testing.T) {
	r := smluReplay(t) // exit status 0 for info -c 16
	if _, err := (&Client{Runner: r}).Info(context.Background(), 16); err == nil || !strings.Contains(err.Error(), "not existed") {
		t.Errorf("got %v", err)
	}
	if err := (&Client{Runner: runnerFunc(func(context.Context, ...string) ([]byte, error) {
		return []byte("Card 3 is not existed\n"), nil
	})}).SetSMLUMode(context.Background(), 3, true); err == nil {
		t.Error("set on a card that is not there succeeded")
	}
}

func TestSMLUSyntaxOverride(t *testing.T) {
	var ran [][]string
	c := &Client{
		Runner: runnerFunc(func(_ context.Context, args ...string) ([]byte, error) {
			ran = append(ran, args)
			switch args[0] {
			case "smlu-destroy":
				return read(t, dirX8, "smlu-destroy-1-ok.txt"), nil
			}
			return read(t, dirX8, "smlu-info-c0-empty.txt"), nil
		}),
		SMLU: SMLUSyntax{
			Info:    func(card int) []string { return []string{"smlu-list", itoa(card)} },
			Destroy: func(card, id int) []string { return []string{"smlu-destroy", itoa(card), itoa(id)} },
		},
	}
	ctx := context.Background()
	if vs, err := c.SMLUs(ctx, 0); err != nil || len(vs) != 0 {
		t.Fatalf("got %v, %v", vs, err)
	}
	if err := c.DestroySMLU(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"smlu-list", "0"}, {"smlu-destroy", "0", "1"}}; !reflect.DeepEqual(ran, want) {
		t.Errorf("ran %q", ran)
	}
	if got := c.syntax().Create(2, 30, 4096); !reflect.DeepEqual(got, []string{"smlu", "-c", "2", "-create", "-mlu", "30", "-mem", "4096"}) {
		t.Errorf("default create kept: %q", got)
	}
	// A listing of another card is refused.
	if _, err := c.SMLUs(ctx, 1); err == nil || !strings.Contains(err.Error(), "answered for card 0") {
		t.Errorf("listing of card 0 for card 1: %v", err)
	}
}

type runnerFunc func(ctx context.Context, args ...string) ([]byte, error)

func (f runnerFunc) Run(ctx context.Context, args ...string) ([]byte, error) { return f(ctx, args...) }

func TestExec(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "cnmon")
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = smlu ]; then echo 'Create sMLU instance on card 0 failed'; echo 'cndev error' >&2; exit 3; fi\n" +
		"echo \"args: $*\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := Exec{Binary: bin}
	out, err := e.Run(context.Background(), "info", "-c", "0")
	if err != nil || string(out) != "args: info -c 0\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	out, err = e.Run(context.Background(), "smlu", "-c", "0")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || ee.Stderr != "cndev error" || string(out) != "Create sMLU instance on card 0 failed\n" {
		t.Fatalf("got %q, %#v", out, err)
	}
	if !strings.Contains(err.Error(), "cnmon smlu -c 0: exit status 3: cndev error") {
		t.Errorf("error text %q", err)
	}
	// Through the Client the refusal is quoted too.
	_, err = (&Client{Runner: e}).CreateSMLU(context.Background(), 0, 10, 100)
	if err == nil || !strings.Contains(err.Error(), `"Create sMLU instance on card 0 failed"`) {
		t.Errorf("client error %v", err)
	}
	if _, err := (Exec{Binary: filepath.Join(dir, "missing")}).Run(context.Background()); !errors.As(err, &ee) || ee.Code != -1 {
		t.Errorf("missing binary: %v", err)
	}
}
