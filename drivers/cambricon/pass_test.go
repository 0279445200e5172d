package cambricon

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// deadline is cnmon's deadline in the tests of a wedged cnmon: short, as
// the plugin's is long (30s) only for a real host's slow calls.
const deadline = 200 * time.Millisecond

// newWedgeableTool is cnmon over the fake with each call under deadline,
// as the plugin runs the real one, so that the fake's Hang times calls
// out.
func newWedgeableTool(t *testing.T) *tool {
	t.Helper()
	tl := newTool(t)
	tl.Client = &cnmon.Client{Runner: vendortool.Bounded{Runner: tl.mock, Tool: "cnmon", Timeout: deadline}}
	return tl
}

// inventoryTaints lists an inventory's taints as card=key=value:effect.
func inventoryTaints(inv *plugin.Inventory) []string {
	var out []string
	for _, d := range inv.Devices {
		for _, tt := range d.Taints {
			out = append(out, d.Name+"="+tt.Key+"="+tt.Value+":"+string(tt.Effect))
		}
	}
	return out
}

// everyCardTainted is every card tainted value.
func everyCardTainted(value string) []string {
	var out []string
	for card := range cards {
		out = append(out, unhealthy(fmt.Sprintf("mlu-%d", card), value)...)
	}
	return out
}

// commandLines joins each recorded command into one line.
func commandLines(cmds [][]string) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, strings.Join(c, " "))
	}
	return out
}

// cnmon wedges: the publish asks the first card, waits out one deadline,
// and asks no other card; every card is published tainted with what was
// last listed on it (an operator's sMLU still holds its share), the
// reason naming the call that timed out. Once cnmon answers the next
// publish lists every card again and untaints them.
func TestWedgedCnmonCostsAPublishOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	ctx, b, _ := newBackend(t, tl, t.TempDir())
	tl.operatorSMLU(t, 5, 30, 4096)
	before, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tl.mock.ResetCommands()
	tl.mock.Hang()
	start := time.Now()
	inv, err := b.Discover(ctx)
	t.Logf("publish of %d MLUs with cnmon wedged, %s deadline: %s", cards, deadline, time.Since(start))
	if err != nil {
		t.Fatalf("a wedged cnmon failed the publish: %v", err)
	}
	if diff := cmp.Diff([]string{"smlu -c 0 -info"}, commandLines(tl.mock.Commands())); diff != "" {
		t.Errorf("cnmon calls of the publish (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(everyCardTainted("ToolError"), inventoryTaints(inv)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	for i, d := range inv.Devices {
		for _, c := range []resourceapi.QualifiedName{CapacityVCore, CapacityVMemory} {
			if got, want := capacity(d, c), capacity(before.Devices[i], c); got != want {
				t.Errorf("%s %s %s, last read %s", d.Name, c, got, want)
			}
		}
	}
	if got := capacity(inv.Devices[5], CapacityVCore); got != "70/70/1/1" {
		t.Errorf("mlu-5 vcore %s, want the 70 the operator's sMLU leaves", got)
	}
	for _, c := range b.cards {
		want := "cnmon smlu -c 0 -info timed out after 200ms; not queried in this pass"
		if c.Index == 0 {
			want = "cnmon smlu -c 0 -info: no answer within 200ms, killed"
		}
		if c.discoverErr == nil || !strings.Contains(c.discoverErr.Error(), want) {
			t.Errorf("MLU %d: reason %v, want it to say %q", c.Index, c.discoverErr, want)
		}
	}

	tl.mock.Resume()
	tl.mock.ResetCommands()
	inv, err = b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := inventoryTaints(inv); len(got) != 0 {
		t.Errorf("taints %v once cnmon answers again", got)
	}
	if got := len(tl.mock.Commands()); got != cards {
		t.Errorf("the next publish ran %d cnmon calls, want one per card", got)
	}
	if b.discoverFailed() {
		t.Error("cards read again still count as failed")
	}
}

// A health round with cnmon wedged asks the first card only and taints
// every card ToolError; the next round, cnmon answering, untaints them.
func TestWedgedCnmonCostsAHealthRoundOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	ctx, b, _ := newBackend(t, tl, t.TempDir(), withHealth(time.Hour))
	tl.mock.ResetCommands()
	tl.mock.Hang()
	start := time.Now()
	changed := b.probeHealth(ctx)
	t.Logf("health round of %d MLUs with cnmon wedged, %s deadline: %s", cards, deadline, time.Since(start))
	if !changed {
		t.Fatal("a wedged cnmon was not a change")
	}
	if diff := cmp.Diff([]string{"info -c 0"}, commandLines(tl.mock.Commands())); diff != "" {
		t.Errorf("cnmon calls of the round (-want +got):\n%s", diff)
	}
	tl.mock.Resume()
	if diff := cmp.Diff(everyCardTainted("ToolError"), cardTaints(t, ctx, b)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("cnmon answering again was not a change")
	}
	if got := cardTaints(t, ctx, b); len(got) != 0 {
		t.Errorf("taints %v once cnmon answers again", got)
	}
}

// cnmon wedges on card 5 when the plugin starts: the start-up reads the
// cards before it, waits out one deadline on it, and asks nothing of the
// cards after it, which are left out naming the call that timed out; the
// cards read are served.
func TestWedgedCnmonAtStartUpCostsOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	tl.mock.Hang(5)
	start := time.Now()
	ctx, b, err := startOn(t, tl, t.TempDir())
	t.Logf("start-up over %d MLUs with cnmon wedged on card 5, %s deadline: %s", cards, deadline, time.Since(start))
	if err != nil {
		t.Fatalf("start-up: %v", err)
	}
	cmds := commandLines(tl.mock.Commands())
	if !slices.Contains(cmds, "info -c 5") {
		t.Fatalf("card 5 was never asked for: %q", cmds)
	}
	for _, c := range cmds {
		for card := 6; card < cards; card++ {
			if strings.HasSuffix(c, fmt.Sprintf("-c %d", card)) || strings.Contains(c, fmt.Sprintf("-c %d ", card)) {
				t.Errorf("card %d queried after cnmon timed out on card 5: %q", card, c)
			}
		}
	}
	u := b.Unusable()
	if len(u) != cards-5 {
		t.Fatalf("%d cards left out, want 5 to 15: %v", len(u), u)
	}
	for i, err := range u {
		want := fmt.Sprintf("cnmon card %d: cnmon info -c 5 timed out after 200ms; not queried in this pass", 5+i)
		if i == 0 {
			want = "cnmon card 5: cnmon info -c 5: no answer within 200ms, killed"
		}
		if err.Error() != want {
			t.Errorf("left out: %q, want %q", err, want)
		}
	}
	tl.mock.Resume()
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 5 {
		t.Errorf("%d cards served, want 0 to 4", len(inv.Devices))
	}
}
