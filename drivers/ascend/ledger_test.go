package ascend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-sh/strata/drivers/plugin"
)

// A ledger as releases before the plugin's generic ledger wrote it (a
// bare JSON list of vNPUs, in vnpus.json) loads, is acted on, and is
// written in the same bytes, so that releases on either side of a
// rolling update read what the other wrote.
func TestLedgerOfEarlierReleasesLoads(t *testing.T) {
	const (
		c1      = `{"claim":"c1","device":"npu-2-vir05-1c-16g-0","card":2,"chip":0,"id":132}`
		c2      = `{"claim":"c2","device":"npu-5-vir10-3c-32g-0","card":5,"chip":0,"id":180}`
		written = "[" + c1 + "," + c2 + "]"
	)
	tool := newTool(t)
	state := t.TempDir()
	ctx, b := newBackend(t, tool, state)
	if _, err := tool.CreateVNPU(ctx, 2, 0, "vir05_1c_16g", 132); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.CreateVNPU(ctx, 5, 0, "vir10_3c_32g", 180); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, "vnpus.json")
	if err := os.WriteFile(path, []byte(written), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := b.ledger.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := []vnpu{
		{Claim: "c1", Device: "npu-2-vir05-1c-16g-0", Card: 2, Chip: 0, ID: 132},
		{Claim: "c2", Device: "npu-5-vir10-3c-32g-0", Card: 5, Chip: 0, ID: 180},
	}
	if diff := cmp.Diff(want, l.Instances); diff != "" {
		t.Errorf("loaded (-want +got):\n%s", diff)
	}
	other := t.TempDir()
	if err := newLedger(other).Save(&plugin.Ledger[vnpu, plugin.NoLedgerExtra]{Instances: want}); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(filepath.Join(other, "vnpus.json")); err != nil || string(raw) != written {
		t.Errorf("written as %s (%v), want %s", raw, err, written)
	}

	// c2 is no longer prepared: its vNPU goes, c1's stays.
	if err := b.Reconcile(ctx, []plugin.ClaimState{{ClaimRef: plugin.ClaimRef{UID: "c1"}}}); err != nil {
		t.Fatal(err)
	}
	if got := tool.all(t); !slices.Equal(got, []string{"2/132:vir05_1c_16g"}) {
		t.Errorf("vNPUs %v, want c1's only", got)
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != "["+c1+"]" {
		t.Errorf("ledger after reconcile %s (%v), want [%s]", raw, err, c1)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "c1"}, nil); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != "null" {
		t.Errorf("ledger after the last unprepare %s (%v), want null", raw, err)
	}
}

// A ledger that does not read (corrupt, or of a later release) stops the
// backend: no vNPU is destroyed, none made, and the file is left as it is.
func TestUnreadableLedgerDestroysNothing(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		err     error
	}{
		"corrupt":       {`[{"claim":"c1","device":"npu-2-vir05-1c-16g-0","card":2,"chip":0,"id":13`, plugin.ErrCorruptLedger},
		"later version": {`{"version":"vnpus/v2","vnpus":[]}`, plugin.ErrUnknownLedgerVersion},
	} {
		t.Run(name, func(t *testing.T) {
			tool := newTool(t)
			state := t.TempDir()
			ctx, b := newBackend(t, tool, state)
			if _, err := b.Prepare(ctx, request("c1", "npu-2-vir05-1c-16g-0")); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(state, "vnpus.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			for op, call := range map[string]func() error{
				"reconcile": func() error { return b.Reconcile(ctx, nil) },
				"unprepare": func() error { return b.Unprepare(ctx, plugin.ClaimRef{UID: "c1"}, nil) },
				"prepare": func() error {
					_, err := b.Prepare(ctx, request("c2", "npu-3-vir05-1c-16g-0"))
					return err
				},
				"discover": func() error {
					_, err := b.Discover(ctx)
					return err
				},
			} {
				if err := call(); !errors.Is(err, tc.err) {
					t.Errorf("%s: %v, want %v", op, err, tc.err)
				}
			}
			if got := tool.all(t); !slices.Equal(got, []string{"2/132:vir05_1c_16g"}) {
				t.Errorf("vNPUs %v, want c1's kept", got)
			}
			if raw, err := os.ReadFile(path); err != nil || string(raw) != tc.content {
				t.Errorf("ledger file now %s (%v)", raw, err)
			}
		})
	}
}

// An operator who destroys one of the plugin's vNPUs and makes one of
// their own with its id (from another template) keeps it: neither the
// claim's unprepare nor a reconcile destroys it. A vNPU of the ledger that
// vanished is dropped from the ledger when the plugin next makes a vNPU
// on its chip, so its claim's unprepare cannot destroy what takes its id
// later, even from the same template.
func TestReplacedVNPUIsNotDestroyed(t *testing.T) {
	tool := newTool(t)
	ctx, b := newBackend(t, tool, t.TempDir())
	replace := func(card, id int, template string) {
		t.Helper()
		if err := tool.DestroyVNPU(ctx, card, 0, id); err != nil {
			t.Fatal(err)
		}
		if template == "" {
			return
		}
		if _, err := tool.CreateVNPU(ctx, card, 0, template, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, uid := range []string{"c1", "c2", "c3"} {
		dev := map[string]string{"c1": "npu-2-vir05-1c-16g-0", "c2": "npu-3-vir05-1c-16g-0", "c3": "npu-4-vir05-1c-16g-0"}[uid]
		if _, err := b.Prepare(ctx, request(uid, dev)); err != nil {
			t.Fatal(err)
		}
	}
	replace(2, 132, "vir10_3c_32g")
	replace(3, 148, "vir10_3c_32g")
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "c1"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Reconcile(ctx, []plugin.ClaimState{{ClaimRef: plugin.ClaimRef{UID: "c3"}}}); err != nil {
		t.Fatal(err)
	}
	if got := tool.all(t); !slices.Equal(got, []string{"2/132:vir10_3c_32g", "3/148:vir10_3c_32g", "4/164:vir05_1c_16g"}) {
		t.Errorf("vNPUs %v, want the operator's two and c3's", got)
	}

	// c3's vNPU vanishes; c4's prepare on the chip drops its entry and
	// gets its id. After c4 is gone, an operator's vNPU of c3's template
	// takes the id, and c3's unprepare leaves it alone.
	replace(4, 164, "")
	if _, err := b.Prepare(ctx, request("c4", "npu-4-vir05-1c-16g-0")); err != nil {
		t.Fatal(err)
	}
	l, err := b.ledger.Load()
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, e := range l.Instances {
		entries = append(entries, fmt.Sprintf("%s:%d/%d", e.Claim, e.Card, e.ID))
	}
	if !slices.Equal(entries, []string{"c4:4/164"}) {
		t.Errorf("ledger %v, want c4's vNPU 164 only", entries)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "c4"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.CreateVNPU(ctx, 4, 0, "vir05_1c_16g", 164); err != nil {
		t.Fatal(err)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "c3"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := tool.all(t); !slices.Equal(got, []string{"2/132:vir10_3c_32g", "3/148:vir10_3c_32g", "4/164:vir05_1c_16g"}) {
		t.Errorf("vNPUs %v, want the operator's three", got)
	}
}

// The plugin never writes a ledger entry without a claim UID: a prepare
// of a claim without one is refused before anything is made. An entry
// without one (a hand-edited ledger) is not the plugin's to destroy: no
// reconcile or unprepare touches its vNPU, which holds its share of the
// chip like an operator's, and the entry stays for the operator to mend.
func TestLedgerEntryWithoutClaimIsLeftAlone(t *testing.T) {
	tool := newTool(t)
	state := t.TempDir()
	ctx, b := newBackend(t, tool, state)
	for name, req := range map[string]*plugin.PrepareRequest{
		"no claim":     {Devices: request("x", "npu-2-vir05-1c-16g-0").Devices},
		"no claim UID": request("", "npu-2-vir05-1c-16g-0"),
	} {
		if _, err := b.Prepare(ctx, req); err == nil || !strings.Contains(err.Error(), "no UID") {
			t.Errorf("prepare with %s: %v, want a refusal", name, err)
		}
	}
	if got := tool.all(t); len(got) != 0 {
		t.Fatalf("vNPUs %v made for a claim without a UID", got)
	}
	if _, err := tool.CreateVNPU(ctx, 2, 0, "vir05_1c_16g", 132); err != nil {
		t.Fatal(err)
	}
	const edited = `[{"claim":"","device":"npu-2-vir05-1c-16g-0","template":"vir05_1c_16g","card":2,"chip":0,"id":132}]`
	path := filepath.Join(state, "vnpus.json")
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Reconcile(ctx, nil); err != nil {
		t.Errorf("reconcile: %v", err)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{}, nil); err != nil {
		t.Errorf("unprepare of no claim: %v", err)
	}
	if got := tool.all(t); !slices.Equal(got, []string{"2/132:vir05_1c_16g"}) {
		t.Errorf("vNPUs %v, want the entry's kept", got)
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != edited {
		t.Errorf("ledger now %s (%v), want it as edited", raw, err)
	}
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range inv.SharedCounters {
		if c := cs.Counters[counterCores]; cs.Name == "npu-2" && c.Value.Value() != 15 {
			t.Errorf("npu-2 offers %d AI cores beside the entry's vNPU, want 15", c.Value.Value())
		}
	}
}
