package npusmi

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// lines splits output into lines without their line ends.
func lines(out []byte) []string {
	return strings.Split(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n")
}

func unexpected(what, line string) error {
	return fmt.Errorf("npu-smi %s: unexpected line %q", what, strings.TrimSpace(line))
}

// firstLine returns the first non-blank line of out, for error messages.
func firstLine(out []byte) string {
	for _, l := range lines(out) {
		if t := strings.TrimSpace(l); t != "" {
			return t
		}
	}
	return ""
}

// splitKV splits npu-smi's "\t%-30s : %s" lines. Keys never hold a colon;
// values may (bus ids).
func splitKV(line string) (key, value string, ok bool) {
	k, v, ok := strings.Cut(line, ":")
	if !ok {
		return "", "", false
	}
	k = strings.TrimSpace(k)
	if k == "" {
		return "", "", false
	}
	return k, strings.TrimSpace(v), true
}

func atoi(what, line, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("npu-smi %s: %q in line %q is not a number", what, s, strings.TrimSpace(line))
	}
	return n, nil
}

// number parses an integer cell that npu-smi may print with %g or as NA.
func number(what, line, s string) (int, error) {
	if s == "NA" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	// Past 2^31 no count or size npu-smi prints is meant; the conversion
	// to int would not be either.
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > math.MaxInt32 {
		return 0, fmt.Errorf("npu-smi %s: %q in line %q is not a number", what, s, strings.TrimSpace(line))
	}
	return int(math.Round(f)), nil
}

// NormalizeBusID turns npu-smi's "0000:C1:00.0" into the kernel's
// "0000:c1:00.0". It returns "" for anything that is not a PCI address
// (npu-smi prints "NA" on some boards).
func NormalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if !busIDRe.MatchString(s) {
		return ""
	}
	return s
}

var busIDRe = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// ParseList parses npu-smi info -l.
func ParseList(out []byte) ([]Card, error) {
	const what = "info -l"
	var cards []Card
	total := -1
	for _, line := range lines(out) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := splitKV(line)
		if !ok {
			return nil, unexpected(what, line)
		}
		switch k {
		case "Total Count", "Card Count":
			n, err := atoi(what, line, v)
			if err != nil {
				return nil, err
			}
			total = n
		case "NPU ID":
			n, err := atoi(what, line, v)
			if err != nil {
				return nil, err
			}
			cards = append(cards, Card{ID: n})
		case "Chip Count":
			if len(cards) == 0 {
				return nil, unexpected(what, line)
			}
			n, err := atoi(what, line, v)
			if err != nil {
				return nil, err
			}
			cards[len(cards)-1].ChipCount = n
		case "Product Name", "Serial Number":
		default:
			return nil, unexpected(what, line)
		}
	}
	if total < 0 {
		return nil, fmt.Errorf("npu-smi %s: no Total Count line in %q", what, firstLine(out))
	}
	if total != len(cards) {
		return nil, fmt.Errorf("npu-smi %s: Total Count is %d but %d NPUs are listed", what, total, len(cards))
	}
	return cards, nil
}

// ParseMapping parses npu-smi info -m. It accepts the 910/910B layout
// (NPU ID, Chip ID, Chip Logic ID, Chip Name) and the A3 one with an extra
// Chip Phy-ID column, in whatever order the header gives.
func ParseMapping(out []byte) ([]MappingEntry, error) {
	const what = "info -m"
	var cols []string
	var entries []MappingEntry
	for _, line := range lines(out) {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		if cols == nil {
			if !strings.HasPrefix(t, "NPU ID") {
				return nil, unexpected(what, line)
			}
			cols = splitColumns(t)
			for _, need := range []string{"NPU ID", "Chip ID", "Chip Logic ID", "Chip Name"} {
				if indexOf(cols, need) < 0 {
					return nil, fmt.Errorf("npu-smi %s: header %q has no %q column", what, t, need)
				}
			}
			if indexOf(cols, "Chip Name") != len(cols)-1 {
				return nil, fmt.Errorf("npu-smi %s: header %q does not end with Chip Name", what, t)
			}
			continue
		}
		f := strings.Fields(t)
		if len(f) < len(cols) {
			return nil, unexpected(what, line)
		}
		e := MappingEntry{PhyID: -1, Name: strings.Join(f[len(cols)-1:], " ")}
		for i, c := range cols[:len(cols)-1] {
			var err error
			switch c {
			case "NPU ID":
				e.Card, err = id(what, line, f[i])
			case "Chip ID":
				e.Chip, err = id(what, line, f[i])
			case "Chip Logic ID":
				e.LogicID, err = idOrDash(what, line, f[i])
			case "Chip Phy-ID":
				e.PhyID, err = idOrDash(what, line, f[i])
			}
			if err != nil {
				return nil, err
			}
		}
		for _, seen := range entries {
			if seen.Card == e.Card && seen.Chip == e.Chip {
				return nil, fmt.Errorf("npu-smi %s: NPU %d chip %d listed twice", what, e.Card, e.Chip)
			}
			if e.LogicID >= 0 && seen.LogicID == e.LogicID {
				return nil, fmt.Errorf("npu-smi %s: logic id %d listed twice", what, e.LogicID)
			}
		}
		entries = append(entries, e)
	}
	if cols == nil {
		return nil, fmt.Errorf("npu-smi %s: no NPU ID header in output %q", what, firstLine(out))
	}
	return entries, nil
}

func idOrDash(what, line, s string) (int, error) {
	if s == "-" {
		return -1, nil
	}
	return id(what, line, s)
}

// id reads an NPU, chip or logic id: a number, not negative.
func id(what, line, s string) (int, error) {
	n, err := atoi(what, line, s)
	if err == nil && n < 0 {
		return 0, fmt.Errorf("npu-smi %s: id %q in line %q is negative", what, s, strings.TrimSpace(line))
	}
	return n, err
}

var multiSpace = regexp.MustCompile(`\s{2,}|\t`)

// splitColumns splits a header whose column names hold single spaces.
func splitColumns(s string) []string {
	var cols []string
	for _, c := range multiSpace.Split(strings.TrimSpace(s), -1) {
		if c = strings.TrimSpace(c); c != "" {
			cols = append(cols, c)
		}
	}
	return cols
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// parseKV parses an output made only of "key : value" lines, rejecting
// anything else (npu-smi's "This device does not support ..." messages).
// Later duplicates of a key are ignored; order is kept in keys.
func parseKV(what string, out []byte) (map[string]string, []string, error) {
	m := map[string]string{}
	var keys []string
	for _, line := range lines(out) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := splitKV(line)
		if !ok {
			return nil, nil, unexpected(what, line)
		}
		if _, dup := m[k]; !dup {
			m[k] = v
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, nil, fmt.Errorf("npu-smi %s: empty output", what)
	}
	return m, keys, nil
}

// ParseBoard parses npu-smi info -t board -i N, with or without -c C.
func ParseBoard(out []byte) (Board, error) {
	const what = "info -t board"
	m, _, err := parseKV(what, out)
	if err != nil {
		return Board{}, err
	}
	b := Board{Chip: -1, Fields: m, ChipType: m["Chip Type"], ChipName: m["Chip Name"]}
	v, ok := m["NPU ID"]
	if !ok {
		return Board{}, fmt.Errorf("npu-smi %s: no NPU ID line in %q", what, firstLine(out))
	}
	if b.Card, err = atoi(what, "NPU ID : "+v, v); err != nil {
		return Board{}, err
	}
	if v, ok := m["Chip ID"]; ok {
		if b.Chip, err = atoi(what, "Chip ID : "+v, v); err != nil {
			return Board{}, err
		}
	}
	if v, ok := m["PCIe Bus Info"]; ok {
		b.BusID = NormalizeBusID(v)
	}
	return b, nil
}

// ParseMemory parses npu-smi info -t memory -i N -c C.
func ParseMemory(out []byte) (Memory, error) {
	const what = "info -t memory"
	m, _, err := parseKV(what, out)
	if err != nil {
		return Memory{}, err
	}
	v, ok := m["HBM Capacity(MB)"]
	if !ok {
		return Memory{}, fmt.Errorf("npu-smi %s: no HBM Capacity(MB) line in %q", what, firstLine(out))
	}
	var mem Memory
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return Memory{}, fmt.Errorf("npu-smi %s: HBM Capacity(MB) %q is not a number", what, v)
	}
	mem.HBMCapacityMB = n
	if v, ok := m["DDR Capacity(MB)"]; ok {
		if mem.DDRCapacityMB, err = strconv.ParseInt(v, 10, 64); err != nil {
			return Memory{}, fmt.Errorf("npu-smi %s: DDR Capacity(MB) %q is not a number", what, v)
		}
	}
	return mem, nil
}

// ParseCommon parses npu-smi info -t common -i N: one section per chip,
// opened by "Chip ID", and a trailing MCU section ("Chip Name : mcu").
func ParseCommon(out []byte) ([]CommonChip, error) {
	const what = "info -t common"
	var chips []CommonChip
	inChip := false
	sawNPU := false
	for _, line := range lines(out) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := splitKV(line)
		if !ok {
			return nil, unexpected(what, line)
		}
		switch k {
		case "NPU ID":
			sawNPU = true
		case "Chip ID":
			n, err := id(what, line, v)
			if err != nil {
				return nil, err
			}
			for _, c := range chips {
				if c.Chip == n {
					return nil, fmt.Errorf("npu-smi %s: chip %d listed twice", what, n)
				}
			}
			chips = append(chips, CommonChip{Chip: n})
			inChip = true
		case "Chip Name":
			inChip = false // MCU or CPU section
		case "Aicore Count":
			if !inChip {
				return nil, unexpected(what, line)
			}
			n, err := atoi(what, line, v)
			if err != nil {
				return nil, err
			}
			chips[len(chips)-1].AICoreCount = n
		}
	}
	if !sawNPU {
		return nil, fmt.Errorf("npu-smi %s: no NPU ID line in %q", what, firstLine(out))
	}
	return chips, nil
}

// isRule tells table borders ("+----+", "|====|", "+====+") apart.
func isRule(t string) bool {
	inner := strings.Trim(t, "+|")
	return inner != "" && strings.Trim(inner, "-=+") == ""
}

// ParseTemplates parses npu-smi info -t template-info: two table rows per
// template (Name AICORE Memory(GB) AICPU VPC VENC JPEGD, then PNGD VDEC
// JPEGE).
func ParseTemplates(out []byte) ([]Template, error) {
	const what = "info -t template-info"
	var tmpls []Template
	sawHeader := false
	pending := false
	for _, line := range lines(out) {
		t := strings.TrimSpace(line)
		if t == "" || isRule(t) {
			continue
		}
		if !strings.HasPrefix(t, "|") {
			return nil, unexpected(what, line)
		}
		inner := strings.TrimSpace(strings.Trim(t, "|"))
		f := strings.Fields(inner)
		switch {
		case strings.HasPrefix(inner, "NPU instance template info"):
			sawHeader = true
		case len(f) > 0 && f[0] == "Name":
			if strings.Join(f, " ") != "Name AICORE Memory AICPU VPC VENC JPEGD" {
				return nil, fmt.Errorf("npu-smi %s: unknown column layout %q", what, t)
			}
			sawHeader = true
		case len(f) > 0 && f[0] == "GB":
			if strings.Join(f, " ") != "GB PNGD VDEC JPEGE" {
				return nil, fmt.Errorf("npu-smi %s: unknown column layout %q", what, t)
			}
		case len(f) == 7 && !pending:
			var nums [6]int
			for i := range nums {
				n, err := number(what, line, f[i+1])
				if err != nil {
					return nil, err
				}
				nums[i] = n
			}
			for _, t := range tmpls {
				if t.Name == f[0] {
					return nil, fmt.Errorf("npu-smi %s: template %s listed twice", what, f[0])
				}
			}
			tmpls = append(tmpls, Template{Name: f[0], AICores: nums[0], MemoryMB: int64(nums[1]) * 1024,
				AICPU: nums[2], VPC: nums[3], VENC: nums[4], JPEGD: nums[5]})
			pending = true
		case len(f) == 3 && pending:
			var nums [3]int
			for i := range nums {
				n, err := number(what, line, f[i])
				if err != nil {
					return nil, err
				}
				nums[i] = n
			}
			last := &tmpls[len(tmpls)-1]
			last.PNGD, last.VDEC, last.JPEGE = nums[0], nums[1], nums[2]
			pending = false
		default:
			return nil, unexpected(what, line)
		}
	}
	if !sawHeader {
		return nil, fmt.Errorf("npu-smi %s: no template table in %q", what, firstLine(out))
	}
	if pending {
		return nil, fmt.Errorf("npu-smi %s: template %s has no second row", what, tmpls[len(tmpls)-1].Name)
	}
	return tmpls, nil
}

var totalVNPURe = regexp.MustCompile(`^Total number of vnpu:\s*(\d+)$`)

// ParseVNPUInfo parses npu-smi info -t info-vnpu -i N -c C: the chip's
// free/total resources and its vNPUs.
func ParseVNPUInfo(out []byte) (VNPUInfo, error) {
	const what = "info -t info-vnpu"
	info := VNPUInfo{Resources: map[string]Resource{}}
	var resCols, vnpuCols []string
	expectRes := false
	total := -1
	for _, line := range lines(out) {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		if strings.HasPrefix(t, "|=") && isRule(t) {
			expectRes = true
			continue
		}
		if isRule(t) {
			continue
		}
		if !strings.HasPrefix(t, "|") {
			return VNPUInfo{}, unexpected(what, line)
		}
		inner := strings.TrimSpace(strings.Trim(t, "|"))
		f := strings.Fields(inner)
		switch {
		case strings.HasPrefix(inner, "NPU resource static info"),
			strings.HasPrefix(inner, "Format:"),
			len(f) == 1 && f[0] == "GB":
		case len(f) > 0 && f[0] == "AICORE":
			resCols = f
		case expectRes:
			if resCols == nil || len(f) != len(resCols) {
				return VNPUInfo{}, unexpected(what, line)
			}
			for i, cell := range f {
				r, err := parseResource(what, line, cell)
				if err != nil {
					return VNPUInfo{}, err
				}
				info.Resources[resCols[i]] = r
			}
			expectRes = false
		case totalVNPURe.MatchString(inner):
			n, err := atoi(what, line, totalVNPURe.FindStringSubmatch(inner)[1])
			if err != nil {
				return VNPUInfo{}, err
			}
			total = n
		case strings.Contains(inner, "Vnpu ID"):
			vnpuCols = cells(t)
			for _, need := range []string{"Vnpu ID", "Template Name"} {
				if indexOf(vnpuCols, need) < 0 {
					return VNPUInfo{}, fmt.Errorf("npu-smi %s: header %q has no %q column", what, t, need)
				}
			}
		case vnpuCols != nil:
			c := cells(t)
			if len(c) != len(vnpuCols) {
				return VNPUInfo{}, unexpected(what, line)
			}
			v := VNPU{VGroup: -1}
			for i, col := range vnpuCols {
				var err error
				switch col {
				case "Vnpu ID":
					v.ID, err = atoi(what, line, c[i])
				case "Vgroup ID":
					if c[i] != "NA" {
						v.VGroup, err = atoi(what, line, c[i])
					}
				case "Container ID":
					if c[i] != "NA" {
						v.ContainerID = c[i]
					}
				case "Status":
					if c[i] != "NA" {
						var st int
						st, err = atoi(what, line, c[i])
						v.InUse = st != 0
					}
				case "Template Name":
					if c[i] != "NA" {
						v.Template = c[i]
					}
				}
				if err != nil {
					return VNPUInfo{}, err
				}
			}
			info.VNPUs = append(info.VNPUs, v)
		default:
			return VNPUInfo{}, unexpected(what, line)
		}
	}
	if len(info.Resources) == 0 && total < 0 {
		return VNPUInfo{}, fmt.Errorf("npu-smi %s: no resource table in %q", what, firstLine(out))
	}
	if total >= 0 && total != len(info.VNPUs) {
		return VNPUInfo{}, fmt.Errorf("npu-smi %s: Total number of vnpu is %d but %d vNPUs are listed", what, total, len(info.VNPUs))
	}
	return info, nil
}

// cells splits a "|  a  |  b  |" row into its trimmed cells.
func cells(t string) []string {
	parts := strings.Split(strings.Trim(t, "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

func parseResource(what, line, cell string) (Resource, error) {
	free, total, ok := strings.Cut(cell, "/")
	if !ok {
		return Resource{}, fmt.Errorf("npu-smi %s: %q in line %q is not Free/Total", what, cell, strings.TrimSpace(line))
	}
	if free == "NA" || total == "NA" {
		return Resource{NA: true}, nil
	}
	f, err := atoi(what, line, free)
	if err != nil {
		return Resource{}, err
	}
	t, err := atoi(what, line, total)
	if err != nil {
		return Resource{}, err
	}
	if f > t {
		return Resource{}, fmt.Errorf("npu-smi %s: %q in line %q has more free than in total", what, cell, strings.TrimSpace(line))
	}
	return Resource{Free: f, Total: t}, nil
}

var (
	statusOKRe   = regexp.MustCompile(`(?m)^\s*Status\s*:\s*OK\b`)
	createdRe    = regexp.MustCompile(`(?m)Message\s*:\s*Create vnpu(?: (\d+))? success\s*$`)
	destroyedRe  = regexp.MustCompile(`(?m)Message\s*:\s*Destroy vnpu (\d+) success\s*$`)
	statusLineRe = regexp.MustCompile(`^\s*(Status|Message)\s*:`)
)

// setFailure quotes the first line of a set command's output that is not
// a Status/Message line: npu-smi's refusal ("Insufficient number of cores
// available, ...", "create vnpu failed.", "Error parameter of -v.").
func setFailure(what string, out []byte) error {
	for _, l := range lines(out) {
		if t := strings.TrimSpace(l); t != "" && !statusLineRe.MatchString(l) {
			return fmt.Errorf("npu-smi %s failed: %q", what, t)
		}
	}
	if fl := firstLine(out); fl != "" {
		return fmt.Errorf("npu-smi %s failed: %q", what, fl)
	}
	return fmt.Errorf("npu-smi %s failed: no output", what)
}

// ParseCreateVNPU checks npu-smi set -t create-vnpu output. npu-smi reports
// no id ("Create vnpu success"), so id is -1 unless a future version
// prints "Create vnpu <id> success".
func ParseCreateVNPU(out []byte) (id int, err error) {
	const what = "set -t create-vnpu"
	m := createdRe.FindSubmatch(out)
	if m == nil || !statusOKRe.Match(out) {
		return -1, setFailure(what, out)
	}
	if len(m[1]) == 0 {
		return -1, nil
	}
	return strconv.Atoi(string(m[1]))
}

// ParseDestroyVNPU checks npu-smi set -t destroy-vnpu output and returns
// the id it reports destroyed.
func ParseDestroyVNPU(out []byte) (int, error) {
	const what = "set -t destroy-vnpu"
	m := destroyedRe.FindSubmatch(out)
	if m == nil || !statusOKRe.Match(out) {
		return -1, setFailure(what, out)
	}
	return strconv.Atoi(string(m[1]))
}
