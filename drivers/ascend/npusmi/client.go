package npusmi

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-sh/strata/internal/vendortool"
)

// Client runs npu-smi queries and vNPU operations through a Runner.
type Client struct {
	Runner Runner
}

// run executes one npu-smi command. On failure the error carries what
// npu-smi printed, since it reports its reasons on stdout.
//
// Within a pass of the caller's (vendortool.NewPass) a command is not run
// once one of the pass has timed out: it fails with a
// *vendortool.SkippedError.
func (c *Client) run(ctx context.Context, args ...string) ([]byte, error) {
	out, err := vendortool.Call(ctx, c.Runner, args...)
	if err == nil {
		return out, nil
	}
	return out, vendortool.Failed(tool, args, out, err)
}

func itoa(n int) string { return strconv.Itoa(n) }

// Chips lists every NPU chip of the node: info -m for the chips, then
// -t common per card for the AI core counts and -t board and -t memory
// per chip for the name, bus id and HBM capacity.
//
// A chip that info -m lists but whose own queries fail (a chip fallen off
// the bus fails every command naming it) is not in chips but in
// unreadable, so that it does not hide the others; within a pass
// (vendortool.NewPass) so are the chips after one that npu-smi timed out
// on, which are not queried. err is a failure of the listing itself
// (info -m), or ctx ending.
func (c *Client) Chips(ctx context.Context) (chips []Chip, unreadable []*ChipError, err error) {
	out, err := c.run(ctx, "info", "-m")
	if err != nil {
		return nil, nil, err
	}
	entries, err := ParseMapping(out)
	if err != nil {
		return nil, nil, err
	}
	cores := map[[2]int]int{}
	commonErr := map[int]error{}
	seenCard := map[int]bool{}
	for _, e := range entries {
		if !e.IsNPU() {
			continue
		}
		if !seenCard[e.Card] {
			seenCard[e.Card] = true
			commonErr[e.Card] = c.readCores(ctx, e.Card, cores)
		}
		err := commonErr[e.Card]
		var ch Chip
		if err == nil {
			ch, err = c.describe(ctx, e, cores[[2]int{e.Card, e.Chip}])
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err() // no verdict on the chip
		}
		if err != nil {
			unreadable = append(unreadable, &ChipError{Card: e.Card, Chip: e.Chip, Err: err})
			continue
		}
		chips = append(chips, ch)
	}
	return chips, unreadable, nil
}

// readCores adds the AI core counts of a card's chips (-t common) to
// cores.
func (c *Client) readCores(ctx context.Context, card int, cores map[[2]int]int) error {
	out, err := c.run(ctx, "info", "-t", "common", "-i", itoa(card))
	if err != nil {
		return err
	}
	common, err := ParseCommon(out)
	if err != nil {
		return err
	}
	for _, cc := range common {
		cores[[2]int{card, cc.Chip}] = cc.AICoreCount
	}
	return nil
}

// describe reads what -t board and -t memory say of a chip of info -m.
func (c *Client) describe(ctx context.Context, e MappingEntry, aiCores int) (Chip, error) {
	ch := Chip{Card: e.Card, Chip: e.Chip, LogicID: e.LogicID, PhyID: e.PhyID,
		Name: strings.TrimPrefix(e.Name, "Ascend "), AICores: aiCores}
	if ch.PhyID < 0 {
		ch.PhyID = e.LogicID
	}
	out, err := c.run(ctx, "info", "-t", "board", "-i", itoa(e.Card), "-c", itoa(e.Chip))
	if err != nil {
		return Chip{}, err
	}
	board, err := ParseBoard(out)
	if err != nil {
		return Chip{}, err
	}
	if board.Card != e.Card || (board.Chip >= 0 && board.Chip != e.Chip) {
		return Chip{}, fmt.Errorf("npu-smi info -t board -i %d -c %d answered for NPU %d chip %d", e.Card, e.Chip, board.Card, board.Chip)
	}
	if board.ChipName != "" {
		ch.Name = board.ChipName
	}
	ch.BusID = board.BusID
	out, err = c.run(ctx, "info", "-t", "memory", "-i", itoa(e.Card), "-c", itoa(e.Chip))
	if err != nil {
		return Chip{}, err
	}
	mem, err := ParseMemory(out)
	if err != nil {
		return Chip{}, err
	}
	ch.MemoryMB = mem.HBMCapacityMB
	return ch, nil
}

// Templates lists the vNPU templates of a chip. npu-smi answers
// template-info per card, so chip only documents the caller's intent.
func (c *Client) Templates(ctx context.Context, card, chip int) ([]Template, error) {
	_ = chip
	out, err := c.run(ctx, "info", "-t", "template-info", "-i", itoa(card))
	if err != nil {
		return nil, err
	}
	return ParseTemplates(out)
}

// VNPUInfo returns a chip's free/total resources and its vNPUs.
func (c *Client) VNPUInfo(ctx context.Context, card, chip int) (VNPUInfo, error) {
	out, err := c.run(ctx, "info", "-t", "info-vnpu", "-i", itoa(card), "-c", itoa(chip))
	if err != nil {
		return VNPUInfo{}, err
	}
	return ParseVNPUInfo(out)
}

// VNPUs lists the vNPUs of a chip.
func (c *Client) VNPUs(ctx context.Context, card, chip int) ([]VNPU, error) {
	info, err := c.VNPUInfo(ctx, card, chip)
	if err != nil {
		return nil, err
	}
	return info.VNPUs, nil
}

// CreateVNPU creates a vNPU from template on a chip. With id < 0 npu-smi
// picks the id; since it does not print it, the vNPU is found by listing
// the chip before and after, so creations on one chip must not overlap.
func (c *Client) CreateVNPU(ctx context.Context, card, chip int, template string, id int) (VNPU, error) {
	var before map[int]bool
	if id < 0 {
		vs, err := c.VNPUs(ctx, card, chip)
		if err != nil {
			return VNPU{}, err
		}
		before = map[int]bool{}
		for _, v := range vs {
			before[v.ID] = true
		}
	}
	args := []string{"set", "-t", "create-vnpu", "-i", itoa(card), "-c", itoa(chip), "-f", template}
	if id >= 0 {
		args = append(args, "-v", itoa(id))
	}
	out, runErr := c.run(ctx, args...)
	reported, err := ParseCreateVNPU(out)
	if runErr != nil {
		return VNPU{}, runErr
	}
	if err != nil {
		return VNPU{}, err
	}
	if id < 0 {
		id = reported
	}
	if id >= 0 && reported >= 0 && reported != id {
		return VNPU{}, fmt.Errorf("npu-smi created vNPU %d, asked for %d", reported, id)
	}
	vs, err := c.VNPUs(ctx, card, chip)
	if err != nil {
		return VNPU{}, fmt.Errorf("listing vNPUs after creating one from %s: %w", template, err)
	}
	var found []VNPU
	for _, v := range vs {
		if (id >= 0 && v.ID == id) || (id < 0 && !before[v.ID]) {
			found = append(found, v)
		}
	}
	switch {
	case len(found) == 1:
		if found[0].Template != template {
			return found[0], fmt.Errorf("vNPU %d was created from %s, not %s", found[0].ID, found[0].Template, template)
		}
		return found[0], nil
	case id >= 0:
		return VNPU{}, fmt.Errorf("npu-smi reported creating vNPU %d on NPU %d chip %d but does not list it", id, card, chip)
	default:
		return VNPU{}, fmt.Errorf("npu-smi reported creating a vNPU on NPU %d chip %d but %d new vNPUs are listed", card, chip, len(found))
	}
}

// DestroyVNPU destroys vNPU id of a chip.
func (c *Client) DestroyVNPU(ctx context.Context, card, chip, id int) error {
	out, runErr := c.run(ctx, "set", "-t", "destroy-vnpu", "-i", itoa(card), "-c", itoa(chip), "-v", itoa(id))
	if runErr != nil {
		return runErr
	}
	got, err := ParseDestroyVNPU(out)
	if err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("npu-smi destroyed vNPU %d, asked for %d", got, id)
	}
	return nil
}
