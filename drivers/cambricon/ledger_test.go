package cambricon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/plugin"
)

// A ledger as releases before the plugin's generic ledger wrote it (a
// JSON object of the instances and the cards switched on, in smlus.json)
// loads, is acted on, and is written in the same bytes, so that releases
// on either side of a rolling update read what the other wrote.
func TestLedgerOfEarlierReleasesLoads(t *testing.T) {
	const (
		c1      = `{"claim":"c1","device":"mlu-3","shareID":"c1-share-0","card":3,"id":1,"vcore":25,"memoryMB":2048}`
		c2      = `{"claim":"c2","device":"mlu-5","card":5,"id":1,"vcore":50,"memoryMB":8192}`
		written = `{"instances":[` + c1 + "," + c2 + `],"smluOn":[3,5]}`
	)
	tool := newTool(t)
	state := t.TempDir()
	ctx, b, _ := newBackend(t, tool, state)
	tool.operatorSMLU(t, 3, 25, 2048)
	tool.operatorSMLU(t, 5, 50, 8192)
	path := filepath.Join(state, "smlus.json")
	if err := os.WriteFile(path, []byte(written), 0o600); err != nil {
		t.Fatal(err)
	}
	want := &ledger{
		Instances: []instance{
			{Claim: "c1", Device: "mlu-3", ShareID: ptr.To(types.UID("c1-share-0")), Card: 3, ID: 1, VCore: 25, MemoryMB: 2048},
			{Claim: "c2", Device: "mlu-5", Card: 5, ID: 1, VCore: 50, MemoryMB: 8192},
		},
		Extra: smluModes{SMLUOn: []int{3, 5}},
	}
	l, err := b.ledger.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Instances, l.Instances); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Extra, l.Extra); diff != "" {
		t.Errorf("cards switched on (-want +got):\n%s", diff)
	}
	other := t.TempDir()
	if err := newLedger(other).Save(want); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(filepath.Join(other, "smlus.json")); err != nil || string(raw) != written {
		t.Errorf("written as %s (%v), want %s", raw, err, written)
	}

	// c2 is no longer prepared: its instance goes and card 5 is switched
	// back; c1's stays.
	if err := b.Reconcile(ctx, []plugin.ClaimState{{ClaimRef: claim("c1")}}); err != nil {
		t.Fatal(err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"3/1:25p.2048mb"}) || tool.smluOn(t, 5) {
		t.Errorf("sMLUs %v, card 5 on %v; want c1's only, off", got, tool.smluOn(t, 5))
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != `{"instances":[`+c1+`],"smluOn":[3]}` {
		t.Errorf("ledger after reconcile %s (%v)", raw, err)
	}
	if err := b.Unprepare(ctx, claim("c1"), nil); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != `{}` {
		t.Errorf("ledger after the last unprepare %s (%v), want {}", raw, err)
	}
}

// A ledger that does not read (corrupt, or of a later release) stops the
// backend: no instance is destroyed, none made, no card switched, and
// the file is left as it is.
func TestUnreadableLedgerDestroysNothing(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		err     error
	}{
		"corrupt":       {`{"instances":[{"claim":"c1","device":"mlu-3","card":3,"id":1,"vcore":25,"memoryMB":2048}],"smluOn":[3`, plugin.ErrCorruptLedger},
		"not an object": {`[{"claim":"c1","device":"mlu-3","card":3,"id":1,"vcore":25,"memoryMB":2048}]`, plugin.ErrCorruptLedger},
		"later version": {`{"version":"smlus/v2","instances":[]}`, plugin.ErrUnknownLedgerVersion},
	} {
		t.Run(name, func(t *testing.T) {
			tool := newTool(t)
			state := t.TempDir()
			ctx, b, _ := newBackend(t, tool, state)
			if _, err := b.Prepare(ctx, request("c1", part("mlu-3", "25", "2Gi"))); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(state, "smlus.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			for op, call := range map[string]func() error{
				"reconcile": func() error { return b.Reconcile(ctx, nil) },
				"unprepare": func() error { return b.Unprepare(ctx, claim("c1"), nil) },
				"prepare": func() error {
					_, err := b.Prepare(ctx, request("c2", part("mlu-4", "25", "2Gi")))
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
			if got := tool.instances(t); !slices.Equal(got, []string{"3/1:25p.2048mb"}) || !tool.smluOn(t, 3) || tool.smluOn(t, 4) {
				t.Errorf("sMLUs %v, card 3 on %v, card 4 on %v; want c1's kept, on, off", got, tool.smluOn(t, 3), tool.smluOn(t, 4))
			}
			if raw, err := os.ReadFile(path); err != nil || string(raw) != tc.content {
				t.Errorf("ledger file now %s (%v)", raw, err)
			}
		})
	}
}

// The plugin never writes a ledger entry without a claim UID: a prepare
// of a claim without one is refused before anything is made. An entry
// without one (a hand-edited ledger) is not the plugin's to destroy: no
// reconcile or unprepare touches its instance or its card's sMLU mode,
// the instance holds its share of the card like an operator's, and the
// entry stays for the operator to mend.
func TestLedgerEntryWithoutClaimIsLeftAlone(t *testing.T) {
	tool := newTool(t)
	state := t.TempDir()
	ctx, b, _ := newBackend(t, tool, state)
	for name, req := range map[string]*plugin.PrepareRequest{
		"no claim":     {Devices: request("x", part("mlu-5", "10", "1Gi")).Devices},
		"no claim UID": request("", part("mlu-5", "10", "1Gi")),
	} {
		if _, err := b.Prepare(ctx, req); err == nil || !strings.Contains(err.Error(), "no UID") {
			t.Errorf("prepare with %s: %v, want a refusal", name, err)
		}
	}
	if got := tool.instances(t); len(got) != 0 || tool.smluOn(t, 5) {
		t.Fatalf("sMLUs %v, card 5 on %v, for a claim without a UID", got, tool.smluOn(t, 5))
	}
	tool.operatorSMLU(t, 5, 30, 4096)
	const edited = `{"instances":[{"claim":"","device":"mlu-5","card":5,"id":1,"vcore":30,"memoryMB":4096}],"smluOn":[5]}`
	path := filepath.Join(state, "smlus.json")
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Reconcile(ctx, nil); err != nil {
		t.Errorf("reconcile: %v", err)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{}, nil); err != nil {
		t.Errorf("unprepare of no claim: %v", err)
	}
	if got := tool.instances(t); !slices.Equal(got, []string{"5/1:30p.4096mb"}) || !tool.smluOn(t, 5) {
		t.Errorf("sMLUs %v, card 5 on %v; want the entry's kept, on", got, tool.smluOn(t, 5))
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != edited {
		t.Errorf("ledger now %s (%v), want it as edited", raw, err)
	}
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if c := d.Capacity[CapacityVCore]; d.Name == "mlu-5" && c.Value.Value() != 70 {
			t.Errorf("mlu-5 offers %d%% beside the entry's instance, want 70", c.Value.Value())
		}
	}
}

// The plugin's sMLU on card 4 goes outside it (an operator destroys it)
// and an operator makes one of another size, which the driver gives the
// same id. The ledger's entry is not taken for it: the card is published
// with what the operator's sMLU leaves, not as free; the next create on
// the card drops the stale entry, and its claim's unprepare leaves the
// operator's sMLU alone.
func TestOperatorSMLUUnderAVanishedEntrysIDHoldsItsShare(t *testing.T) {
	tl := newTool(t)
	ctx, b, _ := newBackend(t, tl, t.TempDir())
	r1, err := b.Prepare(ctx, request("c1", part("mlu-4", "10", "1Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.DestroySMLU(ctx, 4, 1); err != nil {
		t.Fatal(err)
	}
	if in := tl.operatorSMLU(t, 4, 30, 4096); in.ID != 1 {
		t.Fatalf("the operator's sMLU got id %d, want the vanished one's 1", in.ID)
	}
	d := devicesByName(t, ctx, b)["mlu-4"]
	for name, want := range map[resourceapi.QualifiedName]string{
		CapacityVCore:   "70/70/1/1",
		CapacityVMemory: fmt.Sprintf("%d/%d/268435456/268435456", cardMemory-4096<<20, cardMemory-4096<<20),
	} {
		if got := capacity(d, name); got != want {
			t.Errorf("mlu-4 %s %s, want %s: what the operator's sMLU leaves", name, got, want)
		}
	}
	if _, err := b.Prepare(ctx, request("c2", part("mlu-4", "20", "2Gi"))); err != nil {
		t.Fatal(err)
	}
	if got := ledgerClaims(t, b); !slices.Equal(got, []string{"c2:4/2"}) {
		t.Errorf("ledger %v, want c1's stale entry dropped and c2's", got)
	}
	if err := b.Unprepare(ctx, claim("c1"), r1.Devices); err != nil {
		t.Fatal(err)
	}
	if got := tl.instances(t); !slices.Equal(got, []string{"4/1:30p.4096mb", "4/2:20p.2048mb"}) {
		t.Errorf("sMLUs %v, want the operator's and c2's", got)
	}
}
