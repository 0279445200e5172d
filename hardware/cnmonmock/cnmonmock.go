// Package cnmonmock stands in for the cnmon tool of an MLU370-X8 server:
// it answers the queries and sMLU commands the Cambricon plugin runs with
// output in cnmon's formats, generated from its state (the sMLU mode,
// profiles and instances of every card), and refuses what the driver
// refuses: an instance needing more MLU quota or memory than the card's
// other instances leave, sMLU commands on a card whose sMLU mode is off,
// switching sMLU off while instances exist, destroying an instance the
// card does not hold, and card indexes the server does not have. It
// records every command. A test can make it fail every command on a card
// (Lose), wedge (Hang) or report mode switches it does not make
// (IgnoreModeSwitches).
//
// An MLU370-X8 board carries two MLU370 chips and cnmon lists each as a
// card, so a server of eight boards is New(16). The formats and messages
// are those of package cnmon's testdata; see its README for which values
// come from real machines and which are this fake's own wording. The fake
// does not import package cnmon, the parser it feeds: node and profile
// names follow the driver's sources here on their own, and its contract
// tests hold fake and parser to the same captures.
package cnmonmock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-sh/strata/hardware/internal/wedge"
	"github.com/strata-sh/strata/internal/vendortool"
)

// ExitFailure is the fake's exit status for every refusal: cnmon's own
// statuses are not public.
const ExitFailure = 1

// Values of an MLU370-X8 chip as cnmon prints them (see the testdata
// README for their sources).
const (
	ProductName = "MLU370-X8"
	Firmware    = "v1.1.6"
	// Version is a driver with sMLU (the device plugin wants 5.10.27 or
	// later for it); 5.10.31 prints the table of the v5.10.22 captures.
	Version = "v5.10.31"
	// MemoryMB is the physical memory of one chip (half of the board's
	// 48 GB) with inline ECC off.
	MemoryMB = 23374
	// MemoryECCMB is the same chip's memory with inline ECC on.
	MemoryECCMB = 20638
	// PowerCapW is the Pwr:Usage/Cap cap each chip of the board reports.
	PowerCapW = 250
)

// MaxCards is the most cards the fake's layout describes: eight boards.
const MaxCards = 16

// busIDs places the two chips of each of eight boards. The pairs
// 13/16 and 39/3D are real MLU370-X8 boards (captures listed in the
// README); the others are illustrative.
var busIDs = [MaxCards]string{
	"0000:13:00.0", "0000:16:00.0", "0000:39:00.0", "0000:3D:00.0",
	"0000:4F:00.0", "0000:53:00.0", "0000:6F:00.0", "0000:73:00.0",
	"0000:94:00.0", "0000:98:00.0", "0000:B8:00.0", "0000:BC:00.0",
	"0000:CE:00.0", "0000:D2:00.0", "0000:EE:00.0", "0000:F2:00.0",
}

// RecordedTime is the timestamp the recorded tables carry.
var RecordedTime = time.Date(2024, time.March, 12, 10, 21, 7, 0, time.UTC)

// defaultProfiles are the driver's three default sMLU profiles, the whole
// card, a half and a quarter of both quotas (smlu_default_profile_init).
var defaultProfiles = []int{1, 2, 4}

// CNMON is the cnmon of one server.
type CNMON struct {
	mu    sync.Mutex
	now   time.Time
	cards []*card
	cmds  [][]string
	// devChar and capMajor, when set, are where the fake lists the
	// capability node of every instance, as the kernel lists character
	// devices under /sys/dev/char.
	devChar  string
	capMajor int
	// memMB is each card's memory, ecc what the table's Ecc-Error cell
	// prints ("N/A": inline ECC off).
	memMB int64
	ecc   string
	// wedge, if set, holds commands up (Hang).
	wedge wedge.Wedge
}

// PublishCapabilityNodes makes the fake list each sMLU instance's
// capability node from now on as the kernel does when the driver makes
// it: a directory devChar/<major>:<minor> (sysfs's /sys/dev/char) whose
// uevent names the node (DEVNAME=cambricon-caps/cap_dev<card>_mi<id>),
// removed when the instance is destroyed. Minors are the lowest free, as
// the driver's region hands them out.
func (n *CNMON) PublishCapabilityNodes(devChar string, major int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.devChar, n.capMajor = devChar, major
}

func (n *CNMON) capDir(minor int) string {
	return filepath.Join(n.devChar, fmt.Sprintf("%d:%d", n.capMajor, minor))
}

// publishCap writes the capability node of instance in of card c.
func (n *CNMON) publishCap(c *card, in *instance) error {
	used := map[int]bool{}
	for _, k := range n.cards {
		for _, o := range k.insts {
			used[o.minor] = true
		}
	}
	for used[in.minor] {
		in.minor++
	}
	dir := n.capDir(in.minor)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	uevent := fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=%s\n", n.capMajor, in.minor, strings.TrimPrefix(smluDevicePath(c.index, in.id), "/dev/"))
	if err := os.WriteFile(filepath.Join(dir, "uevent"), []byte(uevent), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "dev"), []byte(fmt.Sprintf("%d:%d\n", n.capMajor, in.minor)), 0o644)
}

type card struct {
	index    int
	busID    string
	uuid     string
	health   health
	smlu     bool
	profiles map[int]*profile
	insts    []*instance // by id

	// ignoreSwitch makes sMLU mode switches report success and change
	// nothing (IgnoreModeSwitches).
	ignoreSwitch bool
}

type profile struct {
	id      int
	quota   int
	memMB   int64
	builtin bool
}

type instance struct {
	id int
	p  *profile
	// minor is the capability node's minor, when the fake publishes
	// capability nodes.
	minor int
}

var _ vendortool.Runner = (*CNMON)(nil)

// Option changes the server New builds.
type Option func(*CNMON)

// WithSMLU starts every card with sMLU mode on (a fresh driver starts
// with it off).
func WithSMLU() Option {
	return func(n *CNMON) {
		for _, c := range n.cards {
			c.smlu = true
		}
	}
}

// WithECC turns inline ECC on, as on the 5.10.22 capture's server: each
// card has MemoryECCMB and the table counts ECC errors (none).
func WithECC() Option { return func(n *CNMON) { n.memMB, n.ecc = MemoryECCMB, "0" } }

// WithTime sets the timestamp of the cnmon table.
func WithTime(t time.Time) Option { return func(n *CNMON) { n.now = t } }

// New returns the cnmon of an MLU370-X8 server with cards cnmon cards (1 to
// 16; two per board), sMLU off and no instance.
func New(cards int, opts ...Option) (*CNMON, error) {
	if cards < 1 || cards > MaxCards {
		return nil, fmt.Errorf("cnmonmock: an MLU370-X8 server has 1 to %d cards, not %d", MaxCards, cards)
	}
	n := &CNMON{now: RecordedTime, memMB: MemoryMB, ecc: "N/A", wedge: wedge.Wedge{DeviceFlag: "-c", FakeCommand: FakeCommand}}
	for i := 0; i < cards; i++ {
		c := &card{index: i, busID: busIDs[i], uuid: fmt.Sprintf("%08d-2354-0000-0000-000000000000", 89033010+i),
			profiles: map[int]*profile{}, health: healthGood}
		n.cards = append(n.cards, c)
	}
	for _, o := range opts {
		o(n)
	}
	for _, c := range n.cards {
		for id, div := range defaultProfiles {
			c.profiles[id] = &profile{id: id, quota: 100 / div, memMB: n.memMB / int64(div), builtin: true}
		}
	}
	return n, nil
}

// Commands returns the argument lists of every command run so far.
func (n *CNMON) Commands() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([][]string, len(n.cmds))
	for i, c := range n.cmds {
		out[i] = append([]string{}, c...)
	}
	return out
}

// ResetCommands forgets the recorded commands.
func (n *CNMON) ResetCommands() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cmds = nil
}

// Run answers one cnmon command.
func (n *CNMON) Run(ctx context.Context, args ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cmds = append(n.cmds, append([]string{}, args...))
	if err := n.wait(ctx, args); err != nil {
		return nil, err
	}
	out, code := n.dispatch(args)
	if code != 0 {
		return []byte(out), &vendortool.ExitError{Tool: "cnmon", Args: append([]string(nil), args...), Code: code}
	}
	return []byte(out), nil
}

// fakeError is output for what the fake does not model.
func fakeError(format string, a ...any) (string, int) {
	return "cnmonmock: " + fmt.Sprintf(format, a...) + "\n", ExitFailure
}

func notExisted(idx int) (string, int) {
	return fmt.Sprintf("Card %d is not existed\n", idx), ExitFailure
}

// cardArg resolves "-c N" at args[i:].
func (n *CNMON) cardArg(args []string, i int) (*card, string, int) {
	if len(args) < i+2 || args[i] != "-c" {
		out, code := fakeError("expected -c <card> in %q", strings.Join(args, " "))
		return nil, out, code
	}
	idx, err := strconv.Atoi(args[i+1])
	if err != nil || idx < 0 {
		out, code := fakeError("card %q is not an index", args[i+1])
		return nil, out, code
	}
	if idx >= len(n.cards) {
		out, code := notExisted(idx)
		return nil, out, code
	}
	if n.cards[idx].health.lost {
		out, code := lostOutput(idx)
		return nil, out, code
	}
	return n.cards[idx], "", 0
}

func (n *CNMON) dispatch(args []string) (string, int) {
	if len(args) == 0 {
		return n.summary(n.cards), 0
	}
	switch args[0] {
	case FakeCommand:
		return n.fakeCommand(args[1:])
	case "-c":
		c, out, code := n.cardArg(args, 0)
		if c == nil {
			return out, code
		}
		if len(args) != 2 {
			return fakeError("cnmon -c takes no further options here")
		}
		return n.summary([]*card{c}), 0
	case "info":
		if len(args) == 1 {
			return n.info(n.cards), 0
		}
		c, out, code := n.cardArg(args, 1)
		if c == nil {
			return out, code
		}
		if len(args) != 3 {
			return fakeError("info options %q are not modelled", strings.Join(args[3:], " "))
		}
		return n.info([]*card{c}), 0
	case "set":
		c, out, code := n.cardArg(args, 1)
		if c == nil {
			return out, code
		}
		if len(args) != 5 || args[3] != "-smlu" || (args[4] != "on" && args[4] != "off") {
			return fakeError("set options %q are not modelled", strings.Join(args[3:], " "))
		}
		return n.setSMLU(c, args[4] == "on")
	case "smlu":
		c, out, code := n.cardArg(args, 1)
		if c == nil {
			return out, code
		}
		return n.smluCommand(c, args[3:])
	}
	return fakeError("command %q is not modelled", args[0])
}

const (
	wideRule  = "+------------------------------------------------------------------------------+\n"
	tableRule = "+-------------------------------+----------------------+-----------------------+\n"
)

// summary is the cnmon table of cnmon 5.10.22 and later ("Mode" column).
func (n *CNMON) summary(cards []*card) string {
	var b strings.Builder
	b.WriteString(n.now.Format("Mon Jan _2 15:04:05 2006") + "\n")
	b.WriteString(wideRule)
	fmt.Fprintf(&b, "| %-38s%38s |\n", "CNMON "+Version, "Driver "+Version)
	b.WriteString(tableRule)
	b.WriteString("| Card  VF  Name       Firmware |               Bus-Id | Util        Ecc-Error |\n")
	b.WriteString("| Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | Mode     Compute-Mode |\n")
	b.WriteString("|===============================+======================+=======================|\n")
	for _, c := range cards {
		mode := "FULL"
		if c.smlu {
			mode = "SMLU"
		}
		b.WriteString(cardRows(c.index, c.busID, n.ecc, chipTemp(c.index), powerUsage(c.index), n.memMB, mode, "Default"))
		b.WriteString(tableRule)
	}
	b.WriteString("\n")
	b.WriteString(wideRule)
	b.WriteString("| Processes:                                                                   |\n")
	b.WriteString("|  Card  MI  PID     Command Line                             MLU Memory Usage |\n")
	b.WriteString("|==============================================================================|\n")
	b.WriteString("|  No running processes found                                                  |\n")
	b.WriteString(wideRule)
	return b.String()
}

// cardRows prints the two table rows of one card.
func cardRows(idx int, busID, ecc string, tempC, powerW int, memMB int64, mode, computeMode string) string {
	return fmt.Sprintf("| %-5d %-3s %-9s %9s | %20s | %-10s%11s |\n", idx, "/", ProductName, Firmware, busID, "0%", ecc) +
		fmt.Sprintf("| %3s  %4s %12s/%6s | %9s/%10s | %-8s%13s |\n", "0%", strconv.Itoa(tempC)+"C",
			strconv.Itoa(powerW)+" W", strconv.Itoa(PowerCapW)+" W", "0 MiB", strconv.FormatInt(memMB, 10)+" MiB", mode, computeMode)
}

// Illustrative readings, stable per card.
func chipTemp(idx int) int   { return 28 + (idx*7)%12 }
func boardTemp(idx int) int  { return chipTemp(idx) + 4 }
func memTemp(idx int) int    { return chipTemp(idx) + 2 }
func powerUsage(idx int) int { return 105 + idx%3 }

func kv(b *strings.Builder, depth int, key string, value any) {
	ind := strings.Repeat("    ", depth)
	fmt.Fprintf(b, "%s%-*s : %v\n", ind, 34-len(ind), key, value)
}

func section(b *strings.Builder, depth int, key string) {
	ind := strings.Repeat("    ", depth)
	fmt.Fprintf(b, "%s%-*s :\n", ind, 34-len(ind), key)
}

// info is cnmon info for the given cards.
func (n *CNMON) info(cards []*card) string {
	var b strings.Builder
	fmt.Fprintf(&b, "================CNMON %s================\n", Version)
	for _, c := range cards {
		fmt.Fprintf(&b, "Card %d\n", c.index)
		kv(&b, 1, "Product Name", ProductName)
		kv(&b, 1, "UUID", c.uuid)
		kv(&b, 1, "Firmware", Firmware)
		kv(&b, 1, "Driver", Version)
		kv(&b, 1, "Compute Mode", "Default")
		section(&b, 1, "Health State")
		kv(&b, 2, "Device", c.health.device)
		kv(&b, 2, "Driver", c.health.driver)
		section(&b, 1, "Utilization")
		kv(&b, 2, "MLU Average", "0 %")
		section(&b, 1, "Temperature")
		kv(&b, 2, "Board", fmt.Sprintf("%d C", boardTemp(c.index)))
		kv(&b, 2, "Chip", fmt.Sprintf("%d C", chipTemp(c.index)))
		kv(&b, 2, "Memory", fmt.Sprintf("%d C", memTemp(c.index)))
		section(&b, 1, "Physical Memory Usage")
		kv(&b, 2, "Total", fmt.Sprintf("%d MiB", n.memMB))
		kv(&b, 2, "Used", "0 MiB")
		kv(&b, 2, "Free", fmt.Sprintf("%d MiB", n.memMB))
		section(&b, 1, "Power")
		kv(&b, 2, "Usage", fmt.Sprintf("%d W", powerUsage(c.index)))
		kv(&b, 2, "Cap", fmt.Sprintf("%d W", PowerCapW))
		dom, rest, _ := strings.Cut(c.busID, ":")
		bus, rest, _ := strings.Cut(rest, ":")
		dev, fn, _ := strings.Cut(rest, ".")
		section(&b, 1, "PCI")
		kv(&b, 2, "Domain ID", dom)
		kv(&b, 2, "Bus num", bus)
		kv(&b, 2, "Device", dev)
		kv(&b, 2, "Function", fn)
	}
	return b.String()
}

// setSMLU follows cn_core_set_smlu_mode: switching to the current mode is
// a no-op, switching off with instances is refused.
func (n *CNMON) setSMLU(c *card, on bool) (string, int) {
	word := "off"
	if on {
		word = "on"
	}
	if !on && c.smlu && len(c.insts) > 0 {
		return fmt.Sprintf("Set card %d sMLU mode off failed: Must destroy all instances before sMLU OFF\n", c.index), ExitFailure
	}
	if !c.ignoreSwitch {
		c.smlu = on
	}
	return fmt.Sprintf("Set card %d sMLU mode %s success\n", c.index, word), 0
}

const smluUsage = "Usage: cnmon smlu -c <card> [-info | -create -mlu <percent> -mem <MiB> | -destroy <instance>]\n"

func (n *CNMON) smluCommand(c *card, args []string) (string, int) {
	switch {
	case len(args) == 1 && args[0] == "-info":
		return n.smluInfo(c), 0
	case len(args) == 5 && args[0] == "-create" && args[1] == "-mlu" && args[3] == "-mem":
		quota, err1 := strconv.Atoi(args[2])
		mem, err2 := strconv.ParseInt(args[4], 10, 64)
		if err1 != nil || err2 != nil {
			return smluUsage, ExitFailure
		}
		return n.create(c, quota, mem)
	case len(args) == 2 && args[0] == "-destroy":
		id, err := strconv.Atoi(args[1])
		if err != nil {
			return smluUsage, ExitFailure
		}
		return n.destroy(c, id)
	}
	return smluUsage, ExitFailure
}

func smluOff(c *card) (string, int) {
	return fmt.Sprintf("Card %d sMLU mode is disabled, run: cnmon set -c %d -smlu on\n", c.index, c.index), ExitFailure
}

// smluDevicePath is the capability node of instance id on card: the
// driver's class devnode puts its "cap_dev%d_mi%d" under
// /dev/cambricon-caps (device/cnhost_dev.c).
func smluDevicePath(card, id int) string {
	return fmt.Sprintf("/dev/cambricon-caps/cap_dev%d_mi%d", card, id)
}

// smluProfileName is the driver's name of a profile: "%llup.%llumb"
// (smlu/smlu_core.c).
func smluProfileName(quota int, memMB int64) string {
	return fmt.Sprintf("%dp.%dmb", quota, memMB)
}

// InstanceUUID is the UUID the driver reports for instance id: the card's
// with its tenth byte set to the id (smlu_core.c: uuid[9] = instance_id).
func InstanceUUID(cardUUID string, id int) string {
	// Byte 9 is the second byte of the fourth group: characters 21-22.
	if len(cardUUID) != 36 {
		return cardUUID
	}
	return fmt.Sprintf("%s%02x%s", cardUUID[:21], id&0xff, cardUUID[23:])
}

func (n *CNMON) smluInfo(c *card) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Card %d\n", c.index)
	if !c.smlu {
		kv(&b, 1, "sMLU Mode", "Disable")
		return b.String()
	}
	kv(&b, 1, "sMLU Mode", "Enable")
	kv(&b, 1, "Instance Count", len(c.insts))
	for _, in := range c.insts {
		kv(&b, 1, "Instance", in.id)
		kv(&b, 2, "Profile ID", in.p.id)
		kv(&b, 2, "Profile Name", smluProfileName(in.p.quota, in.p.memMB))
		kv(&b, 2, "UUID", InstanceUUID(c.uuid, in.id))
		kv(&b, 2, "Device Node", smluDevicePath(c.index, in.id))
		kv(&b, 2, "MLU Quota", fmt.Sprintf("%d %%", in.p.quota))
		kv(&b, 2, "Memory", fmt.Sprintf("%d MiB", in.p.memMB))
	}
	return b.String()
}

func (c *card) used() (quota int, memMB int64) {
	for _, in := range c.insts {
		quota += in.p.quota
		memMB += in.p.memMB
	}
	return quota, memMB
}

// create follows cn_smlu_cap_node_init: the quota and the memory must each
// fit what the card's instances leave of 100 % and the physical memory;
// the instance takes the lowest free id from 1. The profile of the same
// quota and memory is reused, or one is added in the lowest free slot
// (cn_smlu_new_profile).
func (n *CNMON) create(c *card, quota int, memMB int64) (string, int) {
	if !c.smlu {
		return smluOff(c)
	}
	if quota < 1 || quota > 100 || memMB < 1 || memMB > n.memMB {
		return fmt.Sprintf("Create sMLU instance on card %d failed: invalid quota %d%% or memory %d MiB (total 100%%, %d MiB)\n",
			c.index, quota, memMB, n.memMB), ExitFailure
	}
	usedQ, usedM := c.used()
	if quota > 100-usedQ {
		return fmt.Sprintf("Create sMLU instance on card %d failed: insufficient MLU quota, request %d%%, remain %d%%\n",
			c.index, quota, 100-usedQ), ExitFailure
	}
	if memMB > n.memMB-usedM {
		return fmt.Sprintf("Create sMLU instance on card %d failed: insufficient memory, request %d MiB, remain %d MiB\n",
			c.index, memMB, n.memMB-usedM), ExitFailure
	}
	var p *profile
	for _, q := range c.profiles {
		if q.quota == quota && q.memMB == memMB && (p == nil || q.id < p.id) {
			p = q
		}
	}
	if p == nil {
		id := 0
		for c.profiles[id] != nil {
			id++
		}
		p = &profile{id: id, quota: quota, memMB: memMB}
		c.profiles[id] = p
	}
	id := 1
	for c.hasInstance(id) {
		id++
	}
	in := &instance{id: id, p: p}
	if n.devChar != "" {
		if err := n.publishCap(c, in); err != nil {
			return fmt.Sprintf("Create sMLU instance on card %d failed: %v\n", c.index, err), ExitFailure
		}
	}
	c.insts = append(c.insts, in)
	sort.Slice(c.insts, func(i, j int) bool { return c.insts[i].id < c.insts[j].id })
	return fmt.Sprintf("Create sMLU instance %d on card %d success\n", id, c.index), 0
}

func (c *card) hasInstance(id int) bool {
	for _, in := range c.insts {
		if in.id == id {
			return true
		}
	}
	return false
}

// destroy follows cn_smlu_cap_node_exit; a profile of the fake's making
// goes with its last instance, as the device plugin recycles them.
func (n *CNMON) destroy(c *card, id int) (string, int) {
	if !c.smlu {
		return smluOff(c)
	}
	for i, in := range c.insts {
		if in.id != id {
			continue
		}
		c.insts = append(c.insts[:i], c.insts[i+1:]...)
		if n.devChar != "" {
			if err := os.RemoveAll(n.capDir(in.minor)); err != nil {
				return fmt.Sprintf("Destroy sMLU instance %d on card %d failed: %v\n", id, c.index, err), ExitFailure
			}
		}
		if !in.p.builtin {
			inUse := false
			for _, o := range c.insts {
				inUse = inUse || o.p == in.p
			}
			if !inUse {
				delete(c.profiles, in.p.id)
			}
		}
		return fmt.Sprintf("Destroy sMLU instance %d on card %d success\n", id, c.index), 0
	}
	return fmt.Sprintf("Destroy sMLU instance %d on card %d failed: instance not found\n", id, c.index), ExitFailure
}
