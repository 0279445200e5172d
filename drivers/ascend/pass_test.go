package ascend

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// deadline is npu-smi's deadline in the tests of a wedged npu-smi: short,
// as the plugin's is long (30s) only for a real host's slow calls.
const deadline = 200 * time.Millisecond

// newWedgeableTool is npu-smi over the fake with each call under
// deadline, as the plugin runs the real one, so that the fake's Hang
// times calls out.
func newWedgeableTool(t *testing.T) *tool {
	t.Helper()
	tl := newTool(t)
	tl.Client = &npusmi.Client{Runner: vendortool.Bounded{Runner: tl.mock, Tool: "npu-smi", Timeout: deadline}}
	return tl
}

// inventoryTaints lists an inventory's taints as device=key=value:effect.
func inventoryTaints(inv *plugin.Inventory) []string {
	var out []string
	for _, d := range inv.Devices {
		for _, tt := range d.Taints {
			out = append(out, d.Name+"="+tt.Key+"="+tt.Value+":"+string(tt.Effect))
		}
	}
	return out
}

// everyChipTainted is every device of the eight chips tainted value, in
// the order Discover publishes them.
func everyChipTainted(value string) []string {
	var whole, slots []string
	for phy := range 8 {
		name := fmt.Sprintf("npu-%d", phy)
		devs := chipTaints(name, value)
		whole, slots = append(whole, devs[0]), append(slots, devs[1:]...)
	}
	return append(whole, slots...)
}

// commandLines joins each recorded command into one line.
func commandLines(cmds [][]string) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, strings.Join(c, " "))
	}
	return out
}

// npu-smi wedges: the publish asks the first chip, waits out one
// deadline, and asks no other chip; every chip is published tainted from
// what was last read of it (an operator's vNPU still holds its share),
// with the reason naming the call that timed out. Once npu-smi answers the next publish reads every chip again and
// untaints them.
func TestWedgedNPUSMICostsAPublishOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	ctx, b := newBackend(t, tl, t.TempDir())
	// An operator's vNPU holds its share of NPU 2, which a publish that
	// cannot read the chip must not hand out.
	if _, err := tl.CreateVNPU(ctx, 2, 0, "vir05_1c_16g", -1); err != nil {
		t.Fatal(err)
	}
	before, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tl.mock.ResetCommands()
	tl.mock.Hang()
	start := time.Now()
	inv, err := b.Discover(ctx)
	t.Logf("publish of 8 NPUs with npu-smi wedged, %s deadline: %s", deadline, time.Since(start))
	if err != nil {
		t.Fatalf("a wedged npu-smi failed the publish: %v", err)
	}
	if diff := cmp.Diff([]string{"info -t info-vnpu -i 0 -c 0"}, commandLines(tl.mock.Commands())); diff != "" {
		t.Errorf("npu-smi calls of the publish (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(everyChipTainted("ToolError"), inventoryTaints(inv)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before.SharedCounters, inv.SharedCounters); diff != "" {
		t.Errorf("counters not those last read (-before +wedged):\n%s", diff)
	}
	if len(inv.Devices) != len(before.Devices) {
		t.Errorf("%d devices published, %d before", len(inv.Devices), len(before.Devices))
	}
	for _, n := range b.npus {
		want := "npu-smi info -t info-vnpu -i 0 -c 0 timed out after 200ms; not queried in this pass"
		if n.PhyID == 0 {
			want = "npu-smi info -t info-vnpu -i 0 -c 0: no answer within 200ms, killed"
		}
		if n.discoverErr == nil || !strings.Contains(n.discoverErr.Error(), want) {
			t.Errorf("NPU %d: reason %v, want it to say %q", n.PhyID, n.discoverErr, want)
		}
	}
	if !b.discoverFailed() {
		t.Error("the chips not read are not read again")
	}

	tl.mock.Resume()
	tl.mock.ResetCommands()
	inv, err = b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := inventoryTaints(inv); len(got) != 0 {
		t.Errorf("taints %v once npu-smi answers again", got)
	}
	if got := len(tl.mock.Commands()); got != 8 {
		t.Errorf("the next publish ran %d npu-smi calls, want one per chip", got)
	}
	if b.discoverFailed() {
		t.Error("chips read again still count as failed")
	}
}

// A health round with npu-smi wedged asks the first chip only and taints
// every chip ToolError; the next round, npu-smi answering, untaints them.
func TestWedgedNPUSMICostsAHealthRoundOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	ctx, b := healthBackend(t, tl, time.Hour)
	tl.mock.ResetCommands()
	tl.mock.Hang()
	start := time.Now()
	changed := b.probeHealth(ctx)
	t.Logf("health round of 8 NPUs with npu-smi wedged, %s deadline: %s", deadline, time.Since(start))
	if !changed {
		t.Fatal("a wedged npu-smi was not a change")
	}
	if diff := cmp.Diff([]string{"info -t health -i 0 -c 0"}, commandLines(tl.mock.Commands())); diff != "" {
		t.Errorf("npu-smi calls of the round (-want +got):\n%s", diff)
	}
	tl.mock.Resume()
	if diff := cmp.Diff(everyChipTainted("ToolError"), taints(t, ctx, b)); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	if !b.probeHealth(ctx) {
		t.Fatal("npu-smi answering again was not a change")
	}
	if got := taints(t, ctx, b); len(got) != 0 {
		t.Errorf("taints %v once npu-smi answers again", got)
	}
}

// npu-smi wedges on NPU 3 when the plugin starts: the start-up reads the
// chips listed before it, waits out one deadline on it, and asks nothing
// of the chips after it, which are left out naming the call that timed
// out; the chips read are served.
func TestWedgedNPUSMIAtStartUpCostsOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	tl.mock.Hang(3)
	start := time.Now()
	ctx, b, err := startOn(t, tl, t.TempDir())
	t.Logf("start-up over 8 NPUs with npu-smi wedged on NPU 3, %s deadline: %s", deadline, time.Since(start))
	if err != nil {
		t.Fatalf("start-up: %v", err)
	}
	cmds := commandLines(tl.mock.Commands())
	timedOut := slices.Index(cmds, "info -t common -i 3")
	if timedOut < 0 {
		t.Fatalf("NPU 3 was never asked for: %q", cmds)
	}
	for _, c := range cmds {
		for card := 4; card < 8; card++ {
			if strings.Contains(c, fmt.Sprintf("-i %d", card)) {
				t.Errorf("NPU %d queried after npu-smi timed out on NPU 3: %q", card, c)
			}
		}
	}
	u := b.Unusable()
	if len(u) != 5 {
		t.Fatalf("%d NPUs left out, want 3 to 7: %v", len(u), u)
	}
	for i, err := range u {
		want := fmt.Sprintf("NPU %d chip 0: npu-smi info -t common -i 3 timed out after 200ms; not queried in this pass", 3+i)
		if i == 0 {
			want = "NPU 3 chip 0: npu-smi info -t common -i 3: no answer within 200ms, killed"
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
	if len(inv.SharedCounters) != 3 {
		t.Errorf("%d NPUs served, want 0 to 2", len(inv.SharedCounters))
	}
}

// npu-smi lists the chips but wedges on every one of them when the plugin
// starts: the start-up asks one chip, waits out one deadline, and fails
// naming the call that timed out, instead of waiting it out per chip.
func TestNPUSMIWedgedOnEveryChipFailsStartUpAfterOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	tl.mock.Hang(0, 1, 2, 3, 4, 5, 6, 7)
	start := time.Now()
	_, _, err := startOn(t, tl, t.TempDir())
	t.Logf("start-up over 8 NPUs with npu-smi wedged on all, %s deadline: %s", deadline, time.Since(start))
	if err == nil || !strings.Contains(err.Error(), "npu-smi can read none of the NPUs") ||
		!strings.Contains(err.Error(), "NPU 7 chip 0: npu-smi info -t common -i 0 timed out after 200ms; not queried in this pass") {
		t.Errorf("start-up: %v, want it refused naming the call that timed out", err)
	}
	if diff := cmp.Diff([]string{"info -m", "info -t common -i 0"}, commandLines(tl.mock.Commands())); diff != "" {
		t.Errorf("npu-smi calls of the start-up (-want +got):\n%s", diff)
	}
}

// TestWedgedNPUSMICostsAnUnprepareOneDeadline: unpreparing a claim of
// two vNPUs with npu-smi wedged calls it once (the first destroy times
// out, the second is not tried), keeps both in the ledger, and the retry
// after npu-smi recovers destroys both.
func TestWedgedNPUSMICostsAnUnprepareOneDeadline(t *testing.T) {
	tl := newWedgeableTool(t)
	ctx, b := newBackend(t, tl, t.TempDir())
	resp, err := b.Prepare(ctx, request("c1", "npu-2-vir05-1c-16g-0", "npu-3-vir05-1c-16g-0"))
	if err != nil {
		t.Fatal(err)
	}
	tl.mock.ResetCommands()
	tl.mock.Hang()
	start := time.Now()
	err = b.Unprepare(ctx, plugin.ClaimRef{UID: "c1"}, resp.Devices)
	t.Logf("unprepare of 2 vNPUs with npu-smi wedged, %s deadline: %s", deadline, time.Since(start))
	if err == nil {
		t.Fatal("an unprepare whose destroys did not run succeeded")
	}
	if got := commandLines(tl.mock.Commands()); len(got) != 1 {
		t.Errorf("npu-smi calls of the wedged unprepare %q, want one", got)
	}
	tl.mock.Resume()
	if got := tl.all(t); len(got) != 2 {
		t.Fatalf("vNPUs after the wedged unprepare %v, want both kept", got)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "c1"}, resp.Devices); err != nil {
		t.Fatalf("retry after npu-smi recovered: %v", err)
	}
	if got := tl.all(t); len(got) != 0 {
		t.Errorf("vNPUs after the retry: %v", got)
	}
}
