package cnmon

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-sh/strata/internal/vendortool"
)

// SMLUSyntax builds the argument lists of cnmon's sMLU commands. No public
// source shows cnmon's sMLU subcommand (Cambricon's CNMon manual is behind
// its developer portal; its device plugin, HAMi and Koordinator drive sMLU
// through the cnDev library, not cnmon), and no capture of it from a real
// host exists: DefaultSMLUSyntax is this package's choice, kept in one
// place so that a host whose cnmon spells it differently is a matter of
// configuration at run time (the plugin's --smlu-*-args flags, through
// ParseSMLUSyntax): see the package documentation.
type SMLUSyntax struct {
	// Info lists a card's sMLU mode and instances (ParseSMLUInfo).
	Info func(card int) []string
	// Create creates one instance (ParseCreateSMLU).
	Create func(card, vcorePercent int, memoryMB int64) []string
	// Destroy destroys one instance (ParseDestroySMLU).
	Destroy func(card, id int) []string
}

// DefaultSMLUSyntax follows the option style of cnmon's documented
// "cnmon set -c <card> -smlu on":
//
//	cnmon smlu -c <card> -info
//	cnmon smlu -c <card> -create -mlu <percent> -mem <MiB>
//	cnmon smlu -c <card> -destroy <instance>
var DefaultSMLUSyntax = SMLUSyntax{
	Info: func(card int) []string { return []string{"smlu", "-c", itoa(card), "-info"} },
	Create: func(card, vcorePercent int, memoryMB int64) []string {
		return []string{"smlu", "-c", itoa(card), "-create", "-mlu", itoa(vcorePercent), "-mem", strconv.FormatInt(memoryMB, 10)}
	},
	Destroy: func(card, id int) []string { return []string{"smlu", "-c", itoa(card), "-destroy", itoa(id)} },
}

// Client runs cnmon queries and sMLU operations through a Runner.
type Client struct {
	Runner Runner
	// SMLU overrides DefaultSMLUSyntax field by field; nil fields keep
	// the default.
	SMLU SMLUSyntax
}

func itoa(n int) string { return strconv.Itoa(n) }

func (c *Client) syntax() SMLUSyntax {
	s := DefaultSMLUSyntax
	if c.SMLU.Info != nil {
		s.Info = c.SMLU.Info
	}
	if c.SMLU.Create != nil {
		s.Create = c.SMLU.Create
	}
	if c.SMLU.Destroy != nil {
		s.Destroy = c.SMLU.Destroy
	}
	return s
}

// run executes one cnmon command. On failure the error carries what cnmon
// printed, since it reports its reasons on stdout. An output saying a card
// is "not existed" is an error whatever the exit status.
//
// Within a pass of the caller's (vendortool.NewPass) a command is not run
// once one of the pass has timed out: it fails with a
// *vendortool.SkippedError.
func (c *Client) run(ctx context.Context, args ...string) ([]byte, error) {
	out, err := vendortool.Call(ctx, c.Runner, args...)
	if err == nil {
		if ne := notExisted(out); ne != "" {
			return out, fmt.Errorf("cnmon %s: %q", strings.Join(args, " "), ne)
		}
		return out, nil
	}
	return out, vendortool.Failed(tool, args, out, err)
}

// Summary runs plain cnmon.
func (c *Client) Summary(ctx context.Context) (Summary, error) {
	out, err := c.run(ctx)
	if err != nil {
		return Summary{}, err
	}
	return ParseSummary(out)
}

// Info runs cnmon info -c card.
func (c *Client) Info(ctx context.Context, card int) (Info, error) {
	out, err := c.run(ctx, "info", "-c", itoa(card))
	if err != nil {
		return Info{}, err
	}
	infos, err := ParseInfo(out)
	if err != nil {
		return Info{}, err
	}
	if len(infos) != 1 || infos[0].Card != card {
		return Info{}, fmt.Errorf("cnmon info -c %d answered for %d cards, the first %d", card, len(infos), infos[0].Card)
	}
	return infos[0], nil
}

// Cards lists the node's cards: the cnmon table for the cards, their names,
// bus ids and memory, then cnmon info -c N per card for its UUID and
// driver version, checked against the table.
//
// A card the table lists whose cnmon info fails or disagrees with the
// table (a card fallen off the bus fails every command naming it) is not
// in cards but in unreadable, so that it does not hide the others; within
// a pass (vendortool.NewPass) so are the cards after one that cnmon timed
// out on, which are not queried. err is a failure of the table itself, or
// ctx ending.
func (c *Client) Cards(ctx context.Context) (cards []Card, unreadable []*CardError, err error) {
	s, err := c.Summary(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, sc := range s.Cards {
		if sc.VF != "/" {
			continue // a virtual function listed by an SR-IOV host
		}
		card, err := c.describe(ctx, s, sc)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err() // no verdict on the card
		}
		if err != nil {
			unreadable = append(unreadable, &CardError{Card: sc.Index, Err: err})
			continue
		}
		cards = append(cards, card)
	}
	return cards, unreadable, nil
}

// describe completes a card of the table with its cnmon info.
func (c *Client) describe(ctx context.Context, s Summary, sc SummaryCard) (Card, error) {
	info, err := c.Info(ctx, sc.Index)
	if err != nil {
		return Card{}, err
	}
	if info.ProductName != sc.Name {
		return Card{}, fmt.Errorf("the table names it %s, cnmon info %s", sc.Name, info.ProductName)
	}
	if info.BusID != "" && sc.BusID != "" && info.BusID != sc.BusID {
		return Card{}, fmt.Errorf("the table gives bus %s, cnmon info %s", sc.BusID, info.BusID)
	}
	card := Card{Index: sc.Index, Name: sc.Name, Family: Family(sc.Name), Firmware: sc.Firmware,
		Driver: info.Driver, BusID: sc.BusID, MemoryMB: sc.MemoryTotalMB, UUID: info.UUID,
		Mode: sc.Mode, ComputeMode: sc.ComputeMode, ECCEnabled: sc.ECCErrors != "N/A"}
	if card.BusID == "" {
		card.BusID = info.BusID
	}
	if card.Driver == "" {
		card.Driver = s.Driver
	}
	if info.MemoryTotalMB != 0 {
		if card.MemoryMB != 0 && card.MemoryMB != info.MemoryTotalMB {
			return Card{}, fmt.Errorf("the table gives %d MiB, cnmon info %d MiB", card.MemoryMB, info.MemoryTotalMB)
		}
		card.MemoryMB = info.MemoryTotalMB
	}
	if card.ComputeMode == "" {
		card.ComputeMode = info.ComputeMode
	}
	card.MLUClusters, card.MLUCores = ModelCores(card.Name)
	if card.BusID == "" || card.MemoryMB == 0 {
		return Card{}, errors.New("no bus id or memory size printed")
	}
	return card, nil
}

// SetSMLUMode runs cnmon set -c card -smlu on|off (HAMi's documented way
// of enabling sMLU). The driver refuses to switch while the card is open
// ("This card is busy") and to switch off while instances exist ("Must
// destroy all instances before sMLU OFF"). cnmon's success message is not
// public: a zero exit is success here, which only says cnmon took the
// switch; a caller that needs the mode reads it back (SMLUInfo).
func (c *Client) SetSMLUMode(ctx context.Context, card int, on bool) error {
	v := "off"
	if on {
		v = "on"
	}
	_, err := c.run(ctx, "set", "-c", itoa(card), "-smlu", v)
	return err
}

// SMLUInfo returns a card's sMLU mode and instances.
func (c *Client) SMLUInfo(ctx context.Context, card int) (SMLUInfo, error) {
	args := c.syntax().Info(card)
	out, err := c.run(ctx, args...)
	if err != nil {
		return SMLUInfo{}, err
	}
	info, err := ParseSMLUInfo(out)
	if err != nil {
		return SMLUInfo{}, err
	}
	if info.Card != card {
		return SMLUInfo{}, fmt.Errorf("cnmon %s answered for card %d", strings.Join(args, " "), info.Card)
	}
	return info, nil
}

// SMLUs lists the sMLU instances of a card (none where sMLU is off).
func (c *Client) SMLUs(ctx context.Context, card int) ([]SMLU, error) {
	info, err := c.SMLUInfo(ctx, card)
	if err != nil {
		return nil, err
	}
	return info.Instances, nil
}

// CreateSMLU creates an sMLU instance of vcorePercent (1 to 100) of the
// card's MLU time and memoryMB MiB of its memory, and returns it as the
// card then lists it. The driver refuses a quota or memory beyond what the
// card's other instances leave, and a card whose sMLU mode is off.
func (c *Client) CreateSMLU(ctx context.Context, card, vcorePercent int, memoryMB int64) (SMLU, error) {
	if vcorePercent < 1 || vcorePercent > 100 {
		return SMLU{}, fmt.Errorf("cnmon: sMLU MLU quota %d%% is not within 1 to 100", vcorePercent)
	}
	if memoryMB < 1 {
		return SMLU{}, fmt.Errorf("cnmon: sMLU memory %d MiB is not positive", memoryMB)
	}
	out, runErr := c.run(ctx, c.syntax().Create(card, vcorePercent, memoryMB)...)
	if runErr != nil {
		return SMLU{}, runErr
	}
	gotCard, id, err := ParseCreateSMLU(out)
	if err != nil {
		return SMLU{}, err
	}
	if gotCard != card {
		return SMLU{}, fmt.Errorf("cnmon created sMLU instance %d on card %d, asked for card %d", id, gotCard, card)
	}
	vs, err := c.SMLUs(ctx, card)
	if err != nil {
		return SMLU{}, fmt.Errorf("listing sMLU instances of card %d after creating %d: %w", card, id, err)
	}
	for _, v := range vs {
		if v.ID != id {
			continue
		}
		if v.VCorePercent != vcorePercent || v.MemoryMB != memoryMB {
			return v, fmt.Errorf("sMLU instance %d of card %d has %d%% and %d MiB, asked for %d%% and %d MiB",
				id, card, v.VCorePercent, v.MemoryMB, vcorePercent, memoryMB)
		}
		return v, nil
	}
	return SMLU{}, fmt.Errorf("cnmon reported creating sMLU instance %d on card %d but does not list it", id, card)
}

// DestroySMLU destroys sMLU instance id of a card. The driver refuses an
// instance a process still uses.
func (c *Client) DestroySMLU(ctx context.Context, card, id int) error {
	out, runErr := c.run(ctx, c.syntax().Destroy(card, id)...)
	if runErr != nil {
		return runErr
	}
	gotCard, got, err := ParseDestroySMLU(out)
	if err != nil {
		return err
	}
	if got != id || gotCard != card {
		return fmt.Errorf("cnmon destroyed sMLU instance %d of card %d, asked for %d of card %d", got, gotCard, id, card)
	}
	return nil
}
