package cnmonmock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/hardware/cnmonmock"
)

const testdata = "../../drivers/cambricon/cnmon/testdata/mlu370-x8-8boards"

func recorded(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newFake(t *testing.T, cards int, opts ...cnmonmock.Option) *cnmonmock.CNMON {
	t.Helper()
	n, err := cnmonmock.New(cards, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func run(t *testing.T, n *cnmonmock.CNMON, cmd string) (string, int) {
	t.Helper()
	out, err := n.Run(context.Background(), strings.Fields(cmd)...)
	if err == nil {
		return string(out), 0
	}
	var ee *cnmon.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("cnmon %s: %v", cmd, err)
	}
	return string(out), ee.Code
}

// TestOutputEqualsRecorded replays the recorded session on a fresh server
// and compares every output with its file byte for byte, and parsed.
func TestOutputEqualsRecorded(t *testing.T) {
	n := newFake(t, 16)
	steps := []struct {
		cmd, file string
		code      int
	}{
		{"", "cnmon.txt", 0},
		{"info -c 16", "info-c16-not-existed.txt", 1},
		{"smlu -c 0 -info", "smlu-info-c0-disabled.txt", 0},
		{"smlu -c 0 -create -mlu 25 -mem 5843", "smlu-create-disabled.txt", 1},
		{"set -c 0 -smlu on", "set-smlu-on-c0.txt", 0},
		{"smlu -c 0 -info", "smlu-info-c0-empty.txt", 0},
		{"smlu -c 0 -create -mlu 25 -mem 5843", "smlu-create-ok.txt", 0},
		{"smlu -c 0 -create -mlu 50 -mem 8192", "", 0},
		{"smlu -c 0 -info", "smlu-info-c0-two.txt", 0},
		{"smlu -c 0 -create -mlu 50 -mem 1024", "smlu-create-insufficient-quota.txt", 1},
		{"smlu -c 0 -create -mlu 10 -mem 12000", "smlu-create-insufficient-memory.txt", 1},
		{"set -c 0 -smlu off", "set-smlu-off-busy.txt", 1},
		{"smlu -c 0 -destroy 7", "smlu-destroy-unknown.txt", 1},
		{"smlu -c 0 -destroy 1", "smlu-destroy-1-ok.txt", 0},
	}
	for i := 0; i < 16; i++ {
		steps = append(steps, struct {
			cmd, file string
			code      int
		}{fmt.Sprintf("info -c %d", i), fmt.Sprintf("info-c%d.txt", i), 0})
	}
	for _, s := range steps {
		out, code := run(t, n, s.cmd)
		if code != s.code {
			t.Errorf("cnmon %s: exit %d, want %d", s.cmd, code, s.code)
		}
		if s.file != "" && out != recorded(t, s.file) {
			t.Errorf("cnmon %s:\n%s\nrecorded %s:\n%s", s.cmd, out, s.file, recorded(t, s.file))
		}
	}

	// Parsed, the fresh server's table and info equal the recordings too.
	n = newFake(t, 16)
	out, _ := run(t, n, "")
	got, err := cnmon.ParseSummary([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want, err := cnmon.ParseSummary([]byte(recorded(t, "cnmon.txt")))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("table parses to %+v, recorded %+v (%v)", got, want, err)
	}
	out, _ = run(t, n, "info")
	all, err := cnmon.ParseInfo([]byte(out))
	if err != nil || len(all) != 16 {
		t.Fatalf("cnmon info: %d cards, %v", len(all), err)
	}
	for i, in := range all {
		rec, err := cnmon.ParseInfo([]byte(recorded(t, fmt.Sprintf("info-c%d.txt", i))))
		if err != nil || !reflect.DeepEqual(in, rec[0]) {
			t.Errorf("card %d: %+v, recorded %+v (%v)", i, in, rec, err)
		}
	}
}

func TestClientCycle(t *testing.T) {
	n := newFake(t, 16)
	c := &cnmon.Client{Runner: n}
	ctx := context.Background()

	cards, unreadable, err := c.Cards(ctx)
	if err != nil || len(unreadable) != 0 {
		t.Fatal(err, unreadable)
	}
	if len(cards) != 16 {
		t.Fatalf("%d cards", len(cards))
	}
	for i, card := range cards {
		if card.Index != i || card.Name != "MLU370-X8" || card.Family != "MLU370" || card.MemoryMB != cnmonmock.MemoryMB ||
			card.MLUCores != 16 || card.ECCEnabled || card.Mode != "FULL" ||
			!strings.HasPrefix(card.BusID, "0000:") || card.BusID != strings.ToLower(card.BusID) || len(card.UUID) != 36 {
			t.Errorf("card %d: %+v", i, card)
		}
	}
	if cards[3].BusID != "0000:3d:00.0" {
		t.Errorf("card 3: %s", cards[3].BusID)
	}

	for _, card := range cards {
		if err := c.SetSMLUMode(ctx, card.Index, true); err != nil {
			t.Fatal(err)
		}
		// Four quarters of MLU time, the memory split unevenly.
		mems := []int64{4096, 8192, 8192, card.MemoryMB - 4096 - 8192 - 8192}
		for k, mem := range mems {
			s, err := c.CreateSMLU(ctx, card.Index, 25, mem)
			if err != nil {
				t.Fatalf("card %d sMLU %d: %v", card.Index, k, err)
			}
			if s.ID != k+1 || s.Card != card.Index || s.DeviceNode != cnmon.SMLUDevicePath(card.Index, k+1) ||
				s.UUID != cnmonmock.InstanceUUID(card.UUID, k+1) || s.ProfileName != cnmon.SMLUProfileName(25, mem) {
				t.Errorf("card %d: created %+v", card.Index, s)
			}
		}
		if _, err := c.CreateSMLU(ctx, card.Index, 1, 1); err == nil ||
			!strings.Contains(err.Error(), "insufficient MLU quota, request 1%, remain 0%") {
			t.Errorf("card %d over full: %v", card.Index, err)
		}
	}
	sum, err := c.Summary(ctx)
	if err != nil || sum.Cards[5].Mode != "SMLU" {
		t.Errorf("table with sMLU on: %+v, %v", sum.Cards, err)
	}
	info, err := c.SMLUInfo(ctx, 9)
	if err != nil || !info.Enabled || len(info.Instances) != 4 || info.Instances[0].ProfileID != 3 || info.Instances[1].ProfileID != 4 || info.Instances[2].ProfileID != 4 {
		t.Errorf("card 9: %+v, %v", info, err)
	}

	// Empty every card again and switch sMLU off.
	for _, card := range cards {
		vs, err := c.SMLUs(ctx, card.Index)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if err := c.DestroySMLU(ctx, card.Index, v.ID); err != nil {
				t.Fatal(err)
			}
		}
		if vs, _ := c.SMLUs(ctx, card.Index); len(vs) != 0 {
			t.Errorf("card %d still holds %+v", card.Index, vs)
		}
		if err := c.SetSMLUMode(ctx, card.Index, false); err != nil {
			t.Fatal(err)
		}
	}
	if vs, err := c.SMLUs(ctx, 0); err != nil || vs != nil {
		t.Errorf("sMLU off: %+v, %v", vs, err)
	}
	after, _, err := c.Cards(ctx)
	if err != nil || !reflect.DeepEqual(after, cards) {
		t.Errorf("cards after the cycle differ: %v", err)
	}
}

func TestClientRefusals(t *testing.T) {
	ctx := context.Background()
	n := newFake(t, 2)
	c := &cnmon.Client{Runner: n}
	var ee *cnmon.ExitError

	// sMLU off.
	_, err := c.CreateSMLU(ctx, 1, 10, 1024)
	if !errors.As(err, &ee) || ee.Code != cnmonmock.ExitFailure || !strings.Contains(err.Error(), "cnmon set -c 1 -smlu on") {
		t.Errorf("sMLU off: %v", err)
	}
	if err := c.SetSMLUMode(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := c.SetSMLUMode(ctx, 1, true); err != nil {
		t.Errorf("switching on twice: %v", err)
	}
	a, err := c.CreateSMLU(ctx, 1, 60, 20000)
	if err != nil {
		t.Fatal(err)
	}
	// Memory over what is left, with quota left.
	_, err = c.CreateSMLU(ctx, 1, 10, 4000)
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "insufficient memory, request 4000 MiB, remain 3374 MiB") {
		t.Errorf("memory exhausted: %v", err)
	}
	// Quota over what is left, with memory left.
	_, err = c.CreateSMLU(ctx, 1, 41, 100)
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "insufficient MLU quota, request 41%, remain 40%") {
		t.Errorf("quota exhausted: %v", err)
	}
	b, err := c.CreateSMLU(ctx, 1, 40, 3374)
	if err != nil || b.ID != 2 {
		t.Fatalf("the exact remainder: %+v, %v", b, err)
	}
	// Unknown instance, another card's instance, sMLU off with instances.
	for _, d := range [][2]int{{1, 3}, {0, 1}} {
		err = c.DestroySMLU(ctx, d[0], d[1])
		if !errors.As(err, &ee) || ee.Code != cnmonmock.ExitFailure {
			t.Errorf("destroy %v: %v", d, err)
		}
	}
	if err := c.SetSMLUMode(ctx, 1, false); err == nil || !strings.Contains(err.Error(), "Must destroy all instances before sMLU OFF") {
		t.Errorf("off with instances: %v", err)
	}
	// Ids are reused lowest first, and so are the fake's profiles.
	if err := c.DestroySMLU(ctx, 1, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DestroySMLU(ctx, 1, b.ID); err != nil {
		t.Fatal(err)
	}
	x, err := c.CreateSMLU(ctx, 1, 10, 1000)
	if err != nil || x.ID != 1 || x.ProfileID != a.ProfileID || a.ProfileID != 3 {
		t.Errorf("reused: %+v (first %+v), %v", x, a, err)
	}
	// The driver's own profiles: a half of the card is profile 1.
	h, err := c.CreateSMLU(ctx, 1, 50, cnmonmock.MemoryMB/2)
	if err != nil || h.ProfileID != 1 || h.ProfileName != "50p.11687mb" {
		t.Errorf("half: %+v, %v", h, err)
	}
	// Cards the server does not have.
	if _, err := c.Info(ctx, 2); err == nil || !strings.Contains(err.Error(), "Card 2 is not existed") {
		t.Errorf("card 2: %v", err)
	}
	if _, err := c.SMLUs(ctx, 7); err == nil || !strings.Contains(err.Error(), "not existed") {
		t.Errorf("card 7: %v", err)
	}
	// What the client would refuse to send, the fake refuses too.
	for _, cmd := range []string{"smlu -c 1 -create -mlu 0 -mem 100", "smlu -c 1 -create -mlu 101 -mem 100",
		"smlu -c 1 -create -mlu 10 -mem 0", "smlu -c 1 -create -mlu 10 -mem 30000", "smlu -c 1 -create -mlu x -mem 1",
		"smlu -c 1 -destroy", "smlu -c 1 -bogus"} {
		if _, code := run(t, n, cmd); code != cnmonmock.ExitFailure {
			t.Errorf("cnmon %s: exit %d", cmd, code)
		}
	}
}

func TestCommandsAndErrors(t *testing.T) {
	n := newFake(t, 4, cnmonmock.WithSMLU(), cnmonmock.WithTime(time.Date(2025, time.January, 2, 3, 4, 5, 0, time.UTC)))
	run(t, n, "-c 2")
	run(t, n, "smlu -c 3 -create -mlu 10 -mem 100")
	if got, want := n.Commands(), [][]string{{"-c", "2"}, {"smlu", "-c", "3", "-create", "-mlu", "10", "-mem", "100"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("commands %q", got)
	}
	n.ResetCommands()
	if len(n.Commands()) != 0 {
		t.Error("commands kept")
	}
	out, _ := run(t, n, "-c 2")
	s, err := cnmon.ParseSummary([]byte(out))
	if err != nil || len(s.Cards) != 1 || s.Cards[0].Index != 2 || s.Cards[0].Mode != "SMLU" ||
		!strings.HasPrefix(out, "Thu Jan  2 03:04:05 2025\n") {
		t.Errorf("cnmon -c 2 with sMLU on:\n%s\n%+v, %v", out, s, err)
	}
	for _, cmd := range []string{"-c 9", "info -c 4", "set -c 5 -smlu on", "smlu -c 6 -info"} {
		if out, code := run(t, n, cmd); code != cnmonmock.ExitFailure || !strings.Contains(out, "is not existed") {
			t.Errorf("cnmon %s: exit %d, %q", cmd, code, out)
		}
	}
	for _, cmd := range []string{"bogus", "-c", "-c x", "-c 1 -x", "info -c 1 -t", "set -c 1 -smlu maybe", "info -x 1", "smlu"} {
		if out, code := run(t, n, cmd); code != cnmonmock.ExitFailure || !strings.HasPrefix(out, "cnmonmock: ") {
			t.Errorf("cnmon %s: exit %d, %q", cmd, code, out)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	for _, bad := range []int{0, 17} {
		if _, err := cnmonmock.New(bad); err == nil {
			t.Errorf("%d cards accepted", bad)
		}
	}
	if got := cnmonmock.InstanceUUID("89033010-2354-0000-0000-000000000000", 12); got != "89033010-2354-0000-000c-000000000000" {
		t.Errorf("instance UUID %s", got)
	}
}

// A card that ignores mode switches reports each as a success and keeps
// its mode, whether set by method or by the fake's command, until it
// recovers; the other cards switch.
func TestIgnoredModeSwitch(t *testing.T) {
	n := newFake(t, 4)
	if err := n.IgnoreModeSwitches(1); err != nil {
		t.Fatal(err)
	}
	if _, code := run(t, n, "strata-fake ignore-switch -c 2"); code != 0 {
		t.Fatalf("ignore-switch: exit %d", code)
	}
	mode := func(card string) string {
		out, _ := run(t, n, "smlu -c "+card+" -info")
		info, err := cnmon.ParseSMLUInfo([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(info.Enabled)
	}
	for _, card := range []string{"1", "2", "3"} {
		out, code := run(t, n, "set -c "+card+" -smlu on")
		if code != 0 || out != "Set card "+card+" sMLU mode on success\n" {
			t.Errorf("switch on card %s: exit %d, %q, want the usual success", card, code, out)
		}
	}
	if got := []string{mode("1"), mode("2"), mode("3")}; !reflect.DeepEqual(got, []string{"false", "false", "true"}) {
		t.Errorf("sMLU on for cards 1-3: %v, want cards 1 and 2 still off", got)
	}
	if err := n.Recover(1); err != nil {
		t.Fatal(err)
	}
	run(t, n, "strata-fake recover -c 2")
	run(t, n, "set -c 1 -smlu on")
	run(t, n, "set -c 2 -smlu on")
	if got := []string{mode("1"), mode("2")}; !reflect.DeepEqual(got, []string{"true", "true"}) {
		t.Errorf("sMLU on for recovered cards 1-2: %v", got)
	}
	if err := n.IgnoreModeSwitches(4); err == nil {
		t.Error("card 4 of four accepted")
	}
}
