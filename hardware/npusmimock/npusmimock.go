// Package npusmimock stands in for the npu-smi tool of one Ascend server:
// it answers the queries and vNPU commands the Ascend plugin runs with
// output in npu-smi's own formats, generated from its state (the vNPUs of
// every chip), and refuses what npu-smi refuses: a template the chip does
// not offer, one needing more AI cores, AI CPUs, media engines or HBM than
// the chip has left, a vNPU id in use or outside the chip's range, and
// destroying a vNPU the chip does not hold. It records every command.
//
// The formats and messages are those of package npusmi's testdata; see its
// README for which values come from real machines. The fake does not
// import package npusmi, the parser it feeds: a bug in the parser must
// not be able to shape the output it is tested against. Its contract
// tests hold both to the same recorded outputs.
package npusmimock

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/strata-sh/strata/hardware/internal/wedge"
	"github.com/strata-sh/strata/internal/vendortool"
)

// Exit statuses of npu-smi: its error codes truncated to a byte.
const (
	// ExitInvalidParameter is NPU_ERR_CODE_INVALID_PARAMETER (-9001).
	ExitInvalidParameter = 215
	// ExitNotSupport is NPU_ERR_CODE_NOT_SUPPORT (-9255), also returned
	// for insufficient resources.
	ExitNotSupport = 217
	// ExitDriverRefused is the fake's status for "create vnpu failed.":
	// the code the driver returns there is not public.
	ExitDriverRefused = 1
)

// NPUSMI is the npu-smi of one server.
type NPUSMI struct {
	mu    sync.Mutex
	spec  *spec
	hbmMB int64
	chips []*chip
	cmds  [][]string
	// wedge, if set, holds commands up (Hang).
	wedge wedge.Wedge
}

type chip struct {
	card, logic, phy int
	busID            string
	vnpus            []*vnpu
	health           health
}

type vnpu struct {
	id     int
	vgroup int // -1: NA
	t      *tmpl
}

var _ vendortool.Runner = (*NPUSMI)(nil)

// Option changes the server New builds.
type Option func(*NPUSMI)

// WithHBM gives every chip hbmMB of HBM instead of the model's.
func WithHBM(hbmMB int64) Option { return func(n *NPUSMI) { n.hbmMB = hbmMB } }

// New returns the npu-smi of a server of model (Model910B3, Model910A)
// with npus NPUs of one chip each (1 to 8), numbered as the server numbers
// them, and no vNPU.
func New(model string, npus int, opts ...Option) (*NPUSMI, error) {
	s, ok := specFor(model)
	if !ok {
		return nil, fmt.Errorf("npusmimock: unknown model %q (want %s or %s)", model, Model910B3, Model910A)
	}
	if npus < 1 || npus > len(s.busIDs) {
		return nil, fmt.Errorf("npusmimock: a %s server has 1 to %d NPUs, not %d", model, len(s.busIDs), npus)
	}
	n := &NPUSMI{spec: s, hbmMB: s.hbmMB, wedge: wedge.Wedge{DeviceFlag: "-i", FakeCommand: FakeCommand}}
	for i := 0; i < npus; i++ {
		n.chips = append(n.chips, &chip{card: i, logic: i, phy: i, busID: s.busIDs[i], health: health{status: "OK"}})
	}
	for _, o := range opts {
		o(n)
	}
	return n, nil
}

// Commands returns the argument lists of every command run so far.
func (n *NPUSMI) Commands() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([][]string, len(n.cmds))
	for i, c := range n.cmds {
		out[i] = append([]string(nil), c...)
	}
	return out
}

// ResetCommands forgets the recorded commands.
func (n *NPUSMI) ResetCommands() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cmds = nil
}

// Run answers one npu-smi command.
func (n *NPUSMI) Run(ctx context.Context, args ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cmds = append(n.cmds, append([]string(nil), args...))
	if err := n.wait(ctx, args); err != nil {
		return nil, err
	}
	out, code := n.dispatch(args)
	if code != 0 {
		return []byte(out), &vendortool.ExitError{Tool: "npu-smi", Args: append([]string(nil), args...), Code: code}
	}
	return []byte(out), nil
}

// opts are the options of one command line.
type opts struct {
	flags map[string]bool
	vals  map[string]string
}

func (o opts) num(name string) (int, bool, error) {
	v, ok := o.vals[name]
	if !ok {
		return 0, false, nil
	}
	i, err := strconv.Atoi(v)
	return i, true, err
}

func parseOpts(args []string) (opts, error) {
	o := opts{flags: map[string]bool{}, vals: map[string]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "-l", "-m":
			o.flags[a] = true
		case "-t", "-i", "-c", "-f", "-v", "-g", "-d":
			if i+1 >= len(args) {
				return o, fmt.Errorf("option %s needs a value", a)
			}
			o.vals[a] = args[i+1]
			i++
		default:
			return o, fmt.Errorf("unknown option %q", a)
		}
	}
	return o, nil
}

// fakeError is output for what the fake does not model; npu-smi's own
// wording for these cases is not public.
func fakeError(format string, a ...any) (string, int) {
	return "npusmimock: " + fmt.Sprintf(format, a...) + "\n", ExitInvalidParameter
}

func (n *NPUSMI) dispatch(args []string) (string, int) {
	if len(args) == 0 {
		return fakeError("no command")
	}
	if args[0] == FakeCommand {
		return n.fakeCommand(args[1:])
	}
	o, err := parseOpts(args[1:])
	if err != nil {
		return fakeError("%v", err)
	}
	switch args[0] {
	case "info":
		switch {
		case o.flags["-l"]:
			return n.infoList(), 0
		case o.flags["-m"]:
			return n.infoMapping(), 0
		}
		switch o.vals["-t"] {
		case "board":
			return n.withChip(o, true, n.board)
		case "memory":
			return n.withChip(o, false, n.memory)
		case "common":
			return n.withCard(o, n.common)
		case "template-info":
			return n.templateInfo(), 0
		case "info-vnpu":
			return n.withChip(o, false, n.infoVNPU)
		case "health":
			return n.withChip(o, false, n.healthInfo)
		}
		return fakeError("info -t %q is not modelled", o.vals["-t"])
	case "set":
		switch o.vals["-t"] {
		case "create-vnpu":
			return n.withChip(o, false, func(c *chip, _ bool) (string, int) { return n.create(c, o) })
		case "destroy-vnpu":
			return n.withChip(o, false, func(c *chip, _ bool) (string, int) { return n.destroy(c, o) })
		}
		return fakeError("set -t %q is not modelled", o.vals["-t"])
	}
	return fakeError("command %q is not modelled", args[0])
}

func (n *NPUSMI) card(o opts) (*chip, string, int) {
	id, ok, err := o.num("-i")
	if !ok || err != nil {
		out, code := fakeError("this command needs -i <NPU ID>")
		return nil, out, code
	}
	for _, c := range n.chips {
		if c.card == id && c.health.lost {
			out, code := lostOutput(id)
			return nil, out, code
		}
		if c.card == id {
			return c, "", 0
		}
	}
	out, code := fakeError("no NPU %d", id)
	return nil, out, code
}

func (n *NPUSMI) withCard(o opts, f func(*chip) (string, int)) (string, int) {
	c, out, code := n.card(o)
	if c == nil {
		return out, code
	}
	return f(c)
}

// withChip resolves -i and -c; with optionalChip the chip may be left out
// (a card-level query, chipGiven false).
func (n *NPUSMI) withChip(o opts, optionalChip bool, f func(*chip, bool) (string, int)) (string, int) {
	c, out, code := n.card(o)
	if c == nil {
		return out, code
	}
	id, ok, err := o.num("-c")
	if err != nil || (!ok && !optionalChip) {
		return fakeError("this command needs -c <Chip ID>")
	}
	if ok && id != 0 {
		return fakeError("NPU %d chip %d is not an NPU chip the fake models", c.card, id)
	}
	return f(c, ok)
}

func kv(b *strings.Builder, key string, value any) {
	fmt.Fprintf(b, "\t%-30s : %v\n", key, value)
}

func (n *NPUSMI) infoList() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\t%-30s : %d\n\n", "Total Count", len(n.chips))
	for _, c := range n.chips {
		kv(&b, "NPU ID", c.card)
		fmt.Fprintf(&b, "\t%-30s : %d\n\n", "Chip Count", 1)
	}
	return b.String()
}

func (n *NPUSMI) infoMapping() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\t%-30s %-30s %-30s %-30s\n", "NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")
	for _, c := range n.chips {
		fmt.Fprintf(&b, "\t%-30d %-30d %-30d %s %s\n", c.card, 0, c.logic, "Ascend", n.spec.chipName)
		if n.spec.hasMCU {
			fmt.Fprintf(&b, "\t%-30d %-30d %-30s %-30s\n", c.card, 1, "-", "Mcu")
		}
	}
	return b.String()
}

// dieID makes up stable die id words for a chip.
func dieID(seed int) string {
	w := make([]string, 5)
	x := uint32(0x9E3779B9) * uint32(seed+1)
	for i := range w {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		w[i] = fmt.Sprintf("%08X", x)
	}
	return strings.Join(w, " ")
}

func (n *NPUSMI) board(c *chip, chipLevel bool) (string, int) {
	s := n.spec
	var b strings.Builder
	if !chipLevel {
		kv(&b, "NPU ID", c.card)
		if s.is910B {
			kv(&b, "Product Name", s.productName)
			kv(&b, "Model", "NA")
			kv(&b, "Manufacturer", "Huawei")
			kv(&b, "Serial Number", fmt.Sprintf("1024150839%02d", c.card))
		}
		kv(&b, "Software Version", s.software)
		kv(&b, "Firmware Version", s.firmware)
		kv(&b, "Compatibility", "OK")
		kv(&b, "Board ID", fmt.Sprintf("0x%02x", s.boardID))
		kv(&b, "PCB ID", "A")
		kv(&b, "BOM ID", 1)
		kv(&b, "PCIe Bus Info", c.busID)
		kv(&b, "Slot ID", c.card)
		kv(&b, "Class ID", "NA")
		kv(&b, "PCI Vendor ID", "0x19E5")
		kv(&b, "PCI Device ID", s.pciDeviceID)
		kv(&b, "Subsystem Vendor ID", "0x19E5")
		kv(&b, "Subsystem Device ID", s.subsysDeviceID)
		kv(&b, "Chip Count", 1)
		return b.String(), 0
	}
	kv(&b, "NPU ID", c.card)
	kv(&b, "Chip ID", 0)
	kv(&b, "Chip Type", "Ascend")
	kv(&b, "Chip Name", s.chipName)
	kv(&b, "Chip Version", "V1")
	kv(&b, "Board ID", fmt.Sprintf("0x%02x", s.boardID))
	kv(&b, "PCB ID", "NA")
	kv(&b, "BOM ID", 1)
	kv(&b, "VDie ID", dieID(c.card))
	ndie := "00000000 00000000 00000000 00000000 00000000" // only read on 910
	if !s.is910B {
		ndie = dieID(c.card + 100)
	}
	kv(&b, "NDie ID", ndie)
	kv(&b, "Chip Position ID", c.card)
	kv(&b, "PCIe Bus Info", c.busID)
	kv(&b, "Firmware Version", s.firmware)
	return b.String(), 0
}

func (n *NPUSMI) memory(c *chip, _ bool) (string, int) {
	s := n.spec
	var b strings.Builder
	if s.is910B {
		kv(&b, "DDR Capacity(MB)", 0)
		kv(&b, "DDR Clock Speed(MHz)", 0)
	} else {
		kv(&b, "DDR Capacity(MB)", s.ddrMB[c.card%len(s.ddrMB)])
		kv(&b, "DDR Clock Speed(MHz)", s.ddrClock)
	}
	kv(&b, "HBM Capacity(MB)", n.hbmMB)
	kv(&b, "HBM Clock Speed(MHz)", s.hbmClock)
	kv(&b, "HBM Temperature(C)", 36+c.card%4)
	if s.is910B {
		fmt.Fprintf(&b, "\t%-30s : 0x%X\n", "HBM Manufacturer ID", 0x57)
	}
	return b.String(), 0
}

func (n *NPUSMI) common(c *chip) (string, int) {
	s := n.spec
	var b strings.Builder
	kv(&b, "NPU ID", c.card)
	kv(&b, "Chip Count", 1)
	b.WriteString("\n")
	kv(&b, "Chip ID", 0)
	if s.is910B {
		kv(&b, "Memory Usage Rate(%)", 0)
	} else {
		kv(&b, "Memory Usage Rate(%)", 4)
	}
	kv(&b, "HBM Usage Rate(%)", s.hbmUsage)
	kv(&b, "Aicore Usage Rate(%)", 0)
	kv(&b, "Aicore Freq(MHZ)", s.aicoreFreq)
	kv(&b, "Aicore curFreq(MHZ)", s.aicoreCurFreq)
	kv(&b, "Aicore Count", s.aiCores)
	kv(&b, "Temperature(C)", 40+c.card%5)
	fmt.Fprintf(&b, "\t%-30s : %.1f\n", "NPU Real-time Power(W)", 90.0+float64(c.card))
	if s.hasMCU {
		b.WriteString("\n")
		kv(&b, "Chip Name", "mcu")
		kv(&b, "Temperature(C)", 37)
	}
	return b.String(), 0
}

const tmplRule = "+------------------------------------------------------------------------------------------+\n"

func (n *NPUSMI) templateInfo() string {
	var b strings.Builder
	b.WriteString(tmplRule)
	b.WriteString("|NPU instance template info is:                                                            |\n")
	b.WriteString("|Name                AICORE    Memory    AICPU     VPC            VENC           JPEGD     |\n")
	b.WriteString("|                               GB                 PNGD           VDEC           JPEGE     |\n")
	b.WriteString("|==========================================================================================|\n")
	for _, t := range n.spec.templates {
		fmt.Fprintf(&b, "|%-19s %-9d %-9d %-9d %-14d %-14d %-10d|\n", t.name, t.aicore, t.memGB, t.aicpu, t.vpc, t.venc, t.jpegd)
		fmt.Fprintf(&b, "|%-49s %-14d %-14d %-10d|\n", " ", t.pngd, t.vdec, t.jpege)
		b.WriteString(tmplRule)
	}
	return b.String()
}

// usage sums what a chip's vNPUs hold.
type usage struct {
	aicore, memGB, aicpu int
	media                [mCount]int
}

func (c *chip) usage() usage {
	var u usage
	for _, v := range c.vnpus {
		u.aicore += v.t.aicore
		u.memGB += v.t.memGB
		u.aicpu += v.t.aicpu
		m := v.t.media()
		for i := range u.media {
			u.media[i] += m[i]
		}
	}
	return u
}

// free is what info-vnpu reports left on a chip.
type free struct {
	aicore, aicoreTotal int
	memGB, memTotalGB   int
	aicpu, aicpuTotal   int
	media, mediaTotal   [mCount]int
}

func (n *NPUSMI) free(c *chip) free {
	s, u := n.spec, c.usage()
	capGB := int(n.hbmMB >> 10)
	f := free{aicore: s.aiCores - u.aicore, aicoreTotal: s.aiCores, memTotalGB: capGB,
		memGB: max(0, capGB-s.reservedGB-u.memGB), aicpu: na, aicpuTotal: na}
	if s.is910B {
		// generate_mem_transform: 910B totals print as 32 or 64 GB.
		switch {
		case f.memTotalGB < 32:
			f.memTotalGB = 32
		case f.memTotalGB > 32 && f.memTotalGB < 64:
			f.memTotalGB = 64
		}
	}
	if s.aicpu != na {
		f.aicpuTotal = s.aicpu
		if len(c.vnpus) > 0 {
			f.aicpuTotal = s.aicpuSRIOV
		}
		f.aicpu = f.aicpuTotal - u.aicpu
	}
	for i, t := range s.media {
		f.mediaTotal[i], f.media[i] = t, t
		if t != na {
			f.media[i] = t - u.media[i]
		}
	}
	return f
}

func cell(free, total int) string {
	if free == na || total == na {
		return "NA/NA"
	}
	return fmt.Sprintf("%d/%d", free, total)
}

const vnpuRule = "+-------------------------------------------------------------------------------+\n"

func (n *NPUSMI) infoVNPU(c *chip, _ bool) (string, int) {
	f := n.free(c)
	var b strings.Builder
	b.WriteString(vnpuRule)
	b.WriteString("| NPU resource static info as follow:                                           |\n")
	b.WriteString("| Format:Free/Total                   NA: Currently, query is not supported.    |\n")
	b.WriteString("| AICORE    Memory    AICPU    VPC    VENC    VDEC    JPEGD    JPEGE    PNGD    |\n")
	b.WriteString("|            GB                                                                 |\n")
	b.WriteString("|===============================================================================|\n")
	fmt.Fprintf(&b, "| %-9s %-9s %-8s %-6s %-7s %-7s %-8s %-8s %-8s|\n",
		cell(f.aicore, f.aicoreTotal), cell(f.memGB, f.memTotalGB), cell(f.aicpu, f.aicpuTotal),
		cell(f.media[mVPC], f.mediaTotal[mVPC]), cell(f.media[mVENC], f.mediaTotal[mVENC]),
		cell(f.media[mVDEC], f.mediaTotal[mVDEC]), cell(f.media[mJPEGD], f.mediaTotal[mJPEGD]),
		cell(f.media[mJPEGE], f.mediaTotal[mJPEGE]), cell(f.media[mPNGD], f.mediaTotal[mPNGD]))
	b.WriteString(vnpuRule)
	fmt.Fprintf(&b, "| Total number of vnpu: %-2d                                                      |\n", len(c.vnpus))
	b.WriteString(vnpuRule)
	b.WriteString("|  Vnpu ID  |  Vgroup ID     |  Container ID  |  Status  |  Template Name       |\n")
	for _, v := range c.vnpus {
		vfg := "NA"
		if v.vgroup >= 0 {
			vfg = fmt.Sprintf("%-12d", v.vgroup)
		}
		b.WriteString(vnpuRule)
		fmt.Fprintf(&b, "|  %-4d     |  %-12s  |  %-12s  |  %-2s      |  %-15s     |\n",
			v.id, vfg, fmt.Sprintf("%012x", 0), fmt.Sprintf("%-2d", 0), fmt.Sprintf("%-15s", v.t.name))
	}
	b.WriteString(vnpuRule)
	return b.String(), 0
}

func (n *NPUSMI) createHelp() string {
	return "Usage: npu-smi set -t create-vnpu [Options...]\n\nOptions:\n" +
		"       -i %d              Card ID\n" +
		"       -c %d              Chip ID\n" +
		"       -f %s              Template Name\n" +
		"                           (" + n.spec.createHelp + ")\n" +
		"       -v %d              Vnpu ID\n"
}

const destroyHelp = "Usage: npu-smi set -t destroy-vnpu [Options...]\n\nOptions:\n" +
	"       -i %d              Card ID\n" +
	"       -c %d              Chip ID\n" +
	"       -v %d              Vnpu ID\n"

// idRange is the vnpu_id range of a chip: [phy_id*16+100, phy_id*16+115].
func idRange(c *chip) (lo, hi int) { return c.phy*16 + 100, c.phy*16 + 115 }

func (n *NPUSMI) idInUse(id int) bool {
	for _, c := range n.chips {
		for _, v := range c.vnpus {
			if v.id == id {
				return true
			}
		}
	}
	return false
}

// create follows npu-smi's set_chip_create_vdevice: the template name is
// checked while parsing (usage text, 215), then check_create_vnpu_param
// compares AI cores, AI CPUs (910B) and DVPP (910B) with the free
// resources (217), then the driver refuses ids and memory ("create vnpu
// failed.").
func (n *NPUSMI) create(c *chip, o opts) (string, int) {
	name := o.vals["-f"]
	var t *tmpl
	for i := range n.spec.templates {
		if n.spec.templates[i].name == name {
			t = &n.spec.templates[i]
		}
	}
	if t == nil {
		return n.createHelp(), ExitInvalidParameter
	}
	id, idGiven, err := o.num("-v")
	if err != nil || (idGiven && id < 0) {
		return n.createHelp(), ExitInvalidParameter
	}
	f := n.free(c)
	if t.aicore > f.aicore {
		return fmt.Sprintf("Insufficient number of cores available, unallocated cores number:%f.\n", float64(f.aicore)), ExitNotSupport
	}
	if n.spec.is910B {
		if f.aicpu != na && t.aicpu > f.aicpu {
			return fmt.Sprintf("Insufficient number of AICPU available, unallocated AICPU number:%d.\n", f.aicpu), ExitNotSupport
		}
		need := t.media()
		for _, i := range []int{mVPC, mVENC, mVDEC, mJPEGD, mJPEGE} {
			if f.media[i] != na && need[i] > f.media[i] {
				return fmt.Sprintf("Insufficient number of DVPP available, unallocated DVPP number:\n"+
					"VPC:%f, VENC:%f, VDEC:%f, JPEGD:%f, JPEGE:%f.\n",
					float64(f.media[mVPC]), float64(max(f.media[mVENC], 0)), float64(f.media[mVDEC]),
					float64(f.media[mJPEGD]), float64(f.media[mJPEGE])), ExitNotSupport
			}
		}
	}
	lo, hi := idRange(c)
	if idGiven {
		if id < lo || id > hi || n.idInUse(id) {
			return "create vnpu failed.\n", ExitDriverRefused
		}
	} else {
		id = -1
		for i := lo; i <= hi; i++ {
			if !n.idInUse(i) {
				id = i
				break
			}
		}
		if id < 0 {
			return "create vnpu failed.\n", ExitDriverRefused
		}
	}
	if c.usage().memGB+t.memGB > int(n.hbmMB>>10) {
		return "create vnpu failed.\n", ExitDriverRefused
	}
	v := &vnpu{id: id, vgroup: -1, t: t}
	if n.spec.is910B {
		v.vgroup = 0
		for used := true; used; {
			used = false
			for _, w := range c.vnpus {
				if w.vgroup == v.vgroup {
					used = true
					v.vgroup++
					break
				}
			}
		}
	}
	c.vnpus = append(c.vnpus, v)
	sort.Slice(c.vnpus, func(i, j int) bool { return c.vnpus[i].id < c.vnpus[j].id })
	return fmt.Sprintf("\t%-30s : %s\n\t%-30s : Create vnpu success\n", "Status", "OK", "Message"), 0
}

// destroy follows set_chip_destroy_vdevice: an id the chip does not hold
// is "Error parameter of -v." and the usage text (215).
func (n *NPUSMI) destroy(c *chip, o opts) (string, int) {
	id, ok, err := o.num("-v")
	if !ok || err != nil {
		return destroyHelp, ExitInvalidParameter
	}
	for i, v := range c.vnpus {
		if v.id == id {
			c.vnpus = append(c.vnpus[:i], c.vnpus[i+1:]...)
			return fmt.Sprintf("\t%-30s : %s\n\t%-30s : Destroy vnpu %d success\n", "Status", "OK", "Message", id), 0
		}
	}
	return "Error parameter of -v.\n" + destroyHelp, ExitInvalidParameter
}

// VNPUs returns the ids of every vNPU the server holds, in chip order:
// the minors of the vdavinci device nodes its driver would have made.
func (n *NPUSMI) VNPUs() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ids []int
	for _, c := range n.chips {
		for _, v := range c.vnpus {
			ids = append(ids, v.id)
		}
	}
	return ids
}
