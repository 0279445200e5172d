package cambricon

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
)

// cnmon reports switching card 6's sMLU mode on and the card stays off:
// the prepare fails naming the card and both modes, makes no sMLU and
// leaves no record of a switch; once the card switches, the kubelet's
// retry prepares.
func TestSMLUModeSwitchThatDoesNotTakeEffectFailsThePrepare(t *testing.T) {
	tl := newTool(t)
	ctx, b, _ := newBackend(t, tl, t.TempDir())
	if err := tl.mock.IgnoreModeSwitches(6); err != nil {
		t.Fatal(err)
	}
	_, err := b.Prepare(ctx, request("c1", part("mlu-6", "50", "4Gi")))
	if want := "MLU 6: sMLU mode is off after cnmon reported switching it on: the switch did not take effect"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("prepare: %v, want %q", err, want)
	}
	if got := tl.ran(); !slices.Equal(got, []string{"set -c 6 -smlu on"}) {
		t.Errorf("cnmon ran %q, want the switch and no create", got)
	}
	if got := tl.instances(t); len(got) != 0 || tl.smluOn(t, 6) {
		t.Errorf("sMLUs %v, card 6 on %v", got, tl.smluOn(t, 6))
	}
	if l := readLedger(t, b); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
		t.Errorf("ledger %+v, want nothing recorded", l)
	}
	if err := tl.mock.Recover(6); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(ctx, request("c1", part("mlu-6", "50", "4Gi"))); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := tl.instances(t); !slices.Equal(got, []string{"6/1:50p.4096mb"}) {
		t.Errorf("sMLUs %v after the retry", got)
	}
}

// cnmon reports switching card 7's sMLU mode off, after its last sMLU
// went, and the card stays on: the unprepare fails naming both modes, and
// the card stays recorded as switched on, so that the next unprepare
// switches it off.
func TestSMLUModeSwitchOffThatDoesNotTakeEffectIsRetried(t *testing.T) {
	tl := newTool(t)
	ctx, b, _ := newBackend(t, tl, t.TempDir())
	resp, err := b.Prepare(ctx, request("c1", part("mlu-7", "50", "4Gi")))
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.mock.IgnoreModeSwitches(7); err != nil {
		t.Fatal(err)
	}
	err = b.Unprepare(ctx, claim("c1"), resp.Devices)
	if want := "MLU 7: sMLU mode is on after cnmon reported switching it off"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("unprepare: %v, want %q", err, want)
	}
	if got := tl.instances(t); len(got) != 0 || !tl.smluOn(t, 7) {
		t.Errorf("sMLUs %v, card 7 on %v; want none, on", got, tl.smluOn(t, 7))
	}
	if l := readLedger(t, b); len(l.Instances) != 0 || !slices.Equal(l.Extra.SMLUOn, []int{7}) {
		t.Errorf("ledger %+v, want card 7 still recorded as switched on", l)
	}
	if err := tl.mock.Recover(7); err != nil {
		t.Fatal(err)
	}
	if err := b.Unprepare(ctx, claim("c1"), resp.Devices); err != nil {
		t.Fatalf("retried unprepare: %v", err)
	}
	if tl.smluOn(t, 7) || len(readLedger(t, b).Extra.SMLUOn) != 0 {
		t.Errorf("card 7 on %v, ledger %+v after the retry", tl.smluOn(t, 7), readLedger(t, b))
	}
}

// unsure is cnmon that switches the mode once and then cannot list the
// card once: whether the switch took effect is not known.
type unsure struct {
	*tool
	armed, blind bool
}

func (u *unsure) SetSMLUMode(ctx context.Context, card int, on bool) error {
	if u.armed {
		u.armed, u.blind = false, true
	}
	return u.tool.SetSMLUMode(ctx, card, on)
}

func (u *unsure) SMLUInfo(ctx context.Context, card int) (cnmon.SMLUInfo, error) {
	if u.blind {
		u.blind = false
		return cnmon.SMLUInfo{}, errors.New("cnmon smlu -c 8 -info: exit status 1")
	}
	return u.tool.SMLUInfo(ctx, card)
}

// The switch on took effect but cnmon cannot read the mode back: the
// prepare fails naming the read, makes no sMLU, and switches the card
// back off.
func TestSMLUModeThatCannotBeReadBackIsSwitchedBack(t *testing.T) {
	u := &unsure{tool: newTool(t), armed: true}
	ctx, b, _ := newBackend(t, u, t.TempDir())
	_, err := b.Prepare(ctx, request("c1", part("mlu-8", "50", "4Gi")))
	if want := "MLU 8: read sMLU mode back after switching it on"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("prepare: %v, want %q", err, want)
	}
	if got := u.ran(); !slices.Equal(got, []string{"set -c 8 -smlu on", "set -c 8 -smlu off"}) {
		t.Errorf("cnmon ran %q, want the switch on and back off, and no create", got)
	}
	if got := u.instances(t); len(got) != 0 || u.smluOn(t, 8) {
		t.Errorf("sMLUs %v, card 8 on %v", got, u.smluOn(t, 8))
	}
	if l := readLedger(t, b); len(l.Instances) != 0 || len(l.Extra.SMLUOn) != 0 {
		t.Errorf("ledger %+v, want nothing recorded", l)
	}
}
