package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Entries shaped like the vendors' (this package imports no vendor): a
// vNPU of the list layout, an sMLU of the object layout, whose ledger
// also records the cards the backend switched on.
type (
	listEntry struct {
		Claim  types.UID `json:"claim"`
		Device string    `json:"device"`
		Card   int       `json:"card"`
		Chip   int       `json:"chip"`
		ID     int       `json:"id"`
	}
	objectEntry struct {
		Claim    types.UID  `json:"claim"`
		Device   string     `json:"device"`
		ShareID  *types.UID `json:"shareID,omitempty"`
		Card     int        `json:"card"`
		ID       int        `json:"id"`
		VCore    int        `json:"vcore"`
		MemoryMB int64      `json:"memoryMB"`
	}
	objectExtra struct {
		SMLUOn []int `json:"smluOn,omitempty"`
	}
)

func (e listEntry) ClaimUID() types.UID   { return e.Claim }
func (e objectEntry) ClaimUID() types.UID { return e.Claim }

// Seeds of both layouts, as the backends write them.
var (
	listSeed = []byte(`[{"claim":"uid-a","device":"npu-0-vir05-1c-16g-0","card":0,"chip":0,"id":100},` +
		`{"claim":"uid-b","device":"npu-1-vir10-3c-32g-0","card":1,"chip":0,"id":116}]`)
	objectSeed = []byte(`{"instances":[{"claim":"uid-a","device":"mlu-0","card":0,"id":1,"vcore":25,"memoryMB":5843},` +
		`{"claim":"uid-b","device":"mlu-0","shareID":"share-1","card":0,"id":2,"vcore":50,"memoryMB":8192}],"smluOn":[0]}`)
)

func TestLedgerLayouts(t *testing.T) {
	entries := []objectEntry{
		{Claim: "uid-a", Device: "mlu-0", Card: 0, ID: 1, VCore: 25, MemoryMB: 5843},
		{Claim: "uid-b", Device: "mlu-0", ShareID: ptr.To(types.UID("share-1")), Card: 0, ID: 2, VCore: 50, MemoryMB: 8192},
	}
	for name, tc := range map[string]struct {
		save func(path string) error
		want string
	}{
		"list": {
			save: func(path string) error {
				return NewListLedgerFile[listEntry](path).Save(&Ledger[listEntry, NoLedgerExtra]{Instances: []listEntry{
					{Claim: "uid-a", Device: "npu-0-vir05-1c-16g-0", ID: 100}, {Claim: "uid-b", Device: "npu-1-vir10-3c-32g-0", Card: 1, ID: 116}}})
			},
			want: string(listSeed),
		},
		"list, empty": {
			save: func(path string) error {
				return NewListLedgerFile[listEntry](path).Save(&Ledger[listEntry, NoLedgerExtra]{})
			},
			want: "null",
		},
		"object": {
			save: func(path string) error {
				return NewLedgerFile[objectEntry, objectExtra](path).Save(&Ledger[objectEntry, objectExtra]{Instances: entries, Extra: objectExtra{SMLUOn: []int{0}}})
			},
			want: string(objectSeed),
		},
		"object, instances only": {
			save: func(path string) error {
				return NewLedgerFile[objectEntry, objectExtra](path).Save(&Ledger[objectEntry, objectExtra]{Instances: entries[:1]})
			},
			want: `{"instances":[{"claim":"uid-a","device":"mlu-0","card":0,"id":1,"vcore":25,"memoryMB":5843}]}`,
		},
		"object, extra only": {
			save: func(path string) error {
				return NewLedgerFile[objectEntry, objectExtra](path).Save(&Ledger[objectEntry, objectExtra]{Extra: objectExtra{SMLUOn: []int{3, 1}}})
			},
			want: `{"smluOn":[3,1]}`,
		},
		"object, empty": {
			save: func(path string) error {
				return NewLedgerFile[objectEntry, objectExtra](path).Save(&Ledger[objectEntry, objectExtra]{})
			},
			want: `{}`,
		},
		"object, no extra": {
			save: func(path string) error {
				return NewLedgerFile[objectEntry, NoLedgerExtra](path).Save(&Ledger[objectEntry, NoLedgerExtra]{Instances: entries[1:]})
			},
			want: `{"instances":[{"claim":"uid-b","device":"mlu-0","shareID":"share-1","card":0,"id":2,"vcore":50,"memoryMB":8192}]}`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.json")
			if err := tc.save(path); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(raw)); diff != "" {
				t.Errorf("file (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLedgerLoad(t *testing.T) {
	for name, tc := range map[string]struct {
		content string // "" for no file
		want    *Ledger[objectEntry, objectExtra]
		err     error
	}{
		"no file": {want: &Ledger[objectEntry, objectExtra]{}},
		"seed": {content: string(objectSeed), want: &Ledger[objectEntry, objectExtra]{
			Instances: []objectEntry{
				{Claim: "uid-a", Device: "mlu-0", Card: 0, ID: 1, VCore: 25, MemoryMB: 5843},
				{Claim: "uid-b", Device: "mlu-0", ShareID: ptr.To(types.UID("share-1")), Card: 0, ID: 2, VCore: 50, MemoryMB: 8192},
			},
			Extra: objectExtra{SMLUOn: []int{0}},
		}},
		"null":   {content: "null", want: &Ledger[objectEntry, objectExtra]{}},
		"spaced": {content: " \n{ \"smluOn\": [2] }\n", want: &Ledger[objectEntry, objectExtra]{Extra: objectExtra{SMLUOn: []int{2}}}},
		// A later release of the same layout may add members: the
		// instances must still be found to be cleaned up.
		"members it does not know": {content: `{"instances":[{"claim":"c","device":"mlu-1","card":1,"id":3,"vcore":5,"memoryMB":512,"node":"n"}],"owner":"x"}`,
			want: &Ledger[objectEntry, objectExtra]{Instances: []objectEntry{{Claim: "c", Device: "mlu-1", Card: 1, ID: 3, VCore: 5, MemoryMB: 512}}}},
		"cut short":            {content: `{"instances":[{"claim":"c"`, err: ErrCorruptLedger},
		"the other layout":     {content: string(listSeed), err: ErrCorruptLedger},
		"a member of bad type": {content: `{"smluOn":"0"}`, err: ErrCorruptLedger},
		"empty file":           {content: " ", err: ErrCorruptLedger},
		"versioned":            {content: `{"version":"v2","instances":[]}`, err: ErrUnknownLedgerVersion},
		"versioned, null":      {content: `{"version":null}`, err: ErrUnknownLedgerVersion},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.json")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := NewLedgerFile[objectEntry, objectExtra](path).Load()
			if !errors.Is(err, tc.err) {
				t.Fatalf("load: %v, want %v", err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreUnexported(Ledger[objectEntry, objectExtra]{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ledger (-want +got):\n%s", diff)
			}
		})
	}
	// The list layout: a bare array, and nothing else.
	for content, want := range map[string]error{string(listSeed): nil, "[]": nil, "null": nil, string(objectSeed): ErrCorruptLedger, `{"version":2}`: ErrUnknownLedgerVersion} {
		path := filepath.Join(t.TempDir(), "ledger.json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewListLedgerFile[listEntry](path).Load(); !errors.Is(err, want) {
			t.Errorf("list ledger %s: %v, want %v", content, err, want)
		}
	}
}

// A ledger is written only when what it holds changed: a node without
// one gets none from a start-up with nothing to do, and members a later
// release wrote stay until there is something to change.
func TestLedgerSavesOnlyChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.json")
	f := NewLedgerFile[objectEntry, objectExtra](path)
	if err := f.Reconcile(nil, func(objectEntry) error { return nil }, func(*Ledger[objectEntry, objectExtra]) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reconcile of no ledger wrote one (%v)", err)
	}
	const later = `{"instances":[{"claim":"c1","device":"mlu-1","card":1,"id":1,"vcore":5,"memoryMB":512,"node":"n"}]}`
	if err := os.WriteFile(path, []byte(later), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Release("c2", func(objectEntry) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(path); string(raw) != later {
		t.Errorf("release of a claim with no instance rewrote the ledger as %s", raw)
	}
}

// history records what a test's destroy and tidy were called with.
type history struct {
	destroyed []string
	tidied    int
	busy      map[int]bool
}

func (h *history) destroy(e objectEntry) error {
	if h.busy[e.ID] {
		return fmt.Errorf("sMLU %d is busy", e.ID)
	}
	h.destroyed = append(h.destroyed, fmt.Sprintf("%s/%d", e.Claim, e.ID))
	return nil
}

// tidy switches off the cards that hold no instance.
func (h *history) tidy(l *Ledger[objectEntry, objectExtra]) error {
	h.tidied++
	var keep []int
	for _, c := range l.Extra.SMLUOn {
		for _, in := range l.Instances {
			if in.Card == c {
				keep = append(keep, c)
				break
			}
		}
	}
	l.Extra.SMLUOn = keep
	return nil
}

func TestLedgerReleaseAndReconcile(t *testing.T) {
	start := &Ledger[objectEntry, objectExtra]{
		Instances: []objectEntry{
			{Claim: "c1", Card: 0, ID: 1}, {Claim: "c2", Card: 1, ID: 2}, {Claim: "c1", Card: 2, ID: 3}, {Claim: "c3", Card: 1, ID: 4},
		},
		Extra: objectExtra{SMLUOn: []int{0, 1, 2}},
	}
	for name, tc := range map[string]struct {
		run           func(f *LedgerFile[objectEntry, objectExtra], h *history) error
		busy          []int
		wantErr       bool
		wantDestroyed []string
		wantLeft      []string
		wantOn        []int
	}{
		"release a claim": {
			run: func(f *LedgerFile[objectEntry, objectExtra], h *history) error {
				return f.Release("c1", h.destroy, h.tidy)
			},
			wantDestroyed: []string{"c1/1", "c1/3"}, wantLeft: []string{"c2/2", "c3/4"}, wantOn: []int{1},
		},
		"release a claim with no instance": {
			run: func(f *LedgerFile[objectEntry, objectExtra], h *history) error {
				return f.Release("c9", h.destroy, h.tidy)
			},
			wantLeft: []string{"c1/1", "c2/2", "c1/3", "c3/4"}, wantOn: []int{0, 1, 2},
		},
		"an instance that is busy stays for a retry": {
			run: func(f *LedgerFile[objectEntry, objectExtra], h *history) error {
				return f.Release("c1", h.destroy, h.tidy)
			},
			busy: []int{3}, wantErr: true,
			wantDestroyed: []string{"c1/1"}, wantLeft: []string{"c2/2", "c1/3", "c3/4"}, wantOn: []int{1, 2},
		},
		"reconcile destroys what no prepared claim owns": {
			run: func(f *LedgerFile[objectEntry, objectExtra], h *history) error {
				return f.Reconcile([]ClaimState{{ClaimRef: ClaimRef{UID: "c2"}}}, h.destroy, h.tidy)
			},
			wantDestroyed: []string{"c1/1", "c1/3", "c3/4"}, wantLeft: []string{"c2/2"}, wantOn: []int{1},
		},
		"reconcile with every claim prepared": {
			run: func(f *LedgerFile[objectEntry, objectExtra], h *history) error {
				return f.Reconcile([]ClaimState{{ClaimRef: ClaimRef{UID: "c1"}}, {ClaimRef: ClaimRef{UID: "c2"}}, {ClaimRef: ClaimRef{UID: "c3"}}}, h.destroy, h.tidy)
			},
			wantLeft: []string{"c1/1", "c2/2", "c1/3", "c3/4"}, wantOn: []int{0, 1, 2},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := NewLedgerFile[objectEntry, objectExtra](filepath.Join(t.TempDir(), "ledger.json"))
			if err := f.Save(&Ledger[objectEntry, objectExtra]{Instances: start.Instances, Extra: start.Extra}); err != nil {
				t.Fatal(err)
			}
			h := &history{busy: map[int]bool{}}
			for _, id := range tc.busy {
				h.busy[id] = true
			}
			if err := tc.run(f, h); (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if h.tidied != 1 {
				t.Errorf("tidy called %d times, want once", h.tidied)
			}
			l, err := f.Load()
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, in := range l.Instances {
				left = append(left, fmt.Sprintf("%s/%d", in.Claim, in.ID))
			}
			if diff := cmp.Diff(tc.wantDestroyed, h.destroyed); diff != "" {
				t.Errorf("destroyed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLeft, left); diff != "" {
				t.Errorf("left in the ledger (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantOn, l.Extra.SMLUOn); diff != "" {
				t.Errorf("cards on (-want +got):\n%s", diff)
			}
		})
	}
}

// A ledger that does not read is neither acted on nor replaced.
func TestUnreadableLedgerIsLeftAlone(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		err     error
	}{
		"corrupt":       {`{"instances":[{"claim":"c1","card":0,"id":1}`, ErrCorruptLedger},
		"later version": {`{"version":"v2","instances":[{"claim":"c1","card":0,"id":1}]}`, ErrUnknownLedgerVersion},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			f := NewLedgerFile[objectEntry, objectExtra](path)
			h := &history{}
			for op, err := range map[string]error{
				"release":   f.Release("c1", h.destroy, h.tidy),
				"reconcile": f.Reconcile(nil, h.destroy, h.tidy),
			} {
				if !errors.Is(err, tc.err) {
					t.Errorf("%s: %v, want %v", op, err, tc.err)
				}
			}
			if len(h.destroyed) != 0 || h.tidied != 0 {
				t.Errorf("destroyed %v and tidied %d times from a ledger that does not read", h.destroyed, h.tidied)
			}
			if raw, err := os.ReadFile(path); err != nil || string(raw) != tc.content {
				t.Errorf("ledger file now %s (%v)", raw, err)
			}
		})
	}
}

// An Extra that is no JSON object has no place in the object layout.
func TestLedgerExtraMustBeAnObject(t *testing.T) {
	f := NewLedgerFile[objectEntry, []int](filepath.Join(t.TempDir(), "ledger.json"))
	if err := f.Save(&Ledger[objectEntry, []int]{Extra: []int{1}}); err == nil {
		t.Error("saved a ledger whose extra is a list")
	}
}
