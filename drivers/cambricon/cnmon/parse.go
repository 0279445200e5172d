package cnmon

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// lines splits output into lines without their line ends.
func lines(out []byte) []string {
	return strings.Split(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n")
}

func unexpected(what, line string) error {
	return fmt.Errorf("cnmon %s: unexpected line %q", what, strings.TrimSpace(line))
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

func atoi(what, line, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("cnmon %s: %q in line %q is not a number", what, s, strings.TrimSpace(line))
	}
	return n, nil
}

// NormalizeBusID turns cnmon's "0000:3D:00.0" into the kernel's
// "0000:3d:00.0". It returns "" for anything that is not a PCI address.
func NormalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if !busIDRe.MatchString(s) {
		return ""
	}
	return s
}

var busIDRe = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// notExisted is cnmon's refusal of a card index it does not have; the
// check scripts Cambricon ships grep cnmon's output for "not existed".
func notExisted(out []byte) string {
	for _, l := range lines(out) {
		if strings.Contains(l, "not existed") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// isRule tells table borders ("+----+", "|====|") apart.
func isRule(t string) bool {
	inner := strings.Trim(t, "+|")
	return inner != "" && strings.Trim(inner, "-=+") == ""
}

// cells splits a "| a | b |" row into its trimmed cells.
func cells(t string) []string {
	parts := strings.Split(strings.Trim(t, "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// mib parses "23374 MiB" (or "23374 MB", or a bare number) as MiB.
func mib(what, line, s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 || (len(f) == 2 && f[1] != "MiB" && f[1] != "MB") {
		return 0, fmt.Errorf("cnmon %s: %q in line %q is not a size in MiB", what, s, strings.TrimSpace(line))
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cnmon %s: %q in line %q is not a size in MiB", what, s, strings.TrimSpace(line))
	}
	return n, nil
}

// percent parses "25 %" or "25%".
func percent(what, line, s string) (int, error) {
	v := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cnmon %s: %q in line %q is not a percentage", what, s, strings.TrimSpace(line))
	}
	return n, nil
}

var dateRe = regexp.MustCompile(`^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4}$`)

// ParseSummary parses plain cnmon (or cnmon -c N): the card table of
// cnmon 5.x ("Card VF Name Firmware | Bus-Id | Util Ecc-Error" over "Fan
// Temp Pwr:Usage/Cap | Memory-Usage | Mode Compute-Mode", or "SR-IOV" for
// Mode in earlier 5.10 releases) and of cnmon 4.x (an "Inited Driver"
// column instead of Bus-Id, "vMemory-Usage" instead of the modes). The
// Processes box that follows is skipped.
func ParseSummary(out []byte) (Summary, error) {
	const what = "table"
	var s Summary
	var head1, head2 []string
	var pending *SummaryCard
	sawHeader, inCards, inProcesses, sawDate := false, false, false, false
	for _, line := range lines(out) {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		if inProcesses {
			if !strings.HasPrefix(t, "|") && !strings.HasPrefix(t, "+") {
				return Summary{}, unexpected(what, line)
			}
			continue
		}
		if !strings.HasPrefix(t, "|") && !strings.HasPrefix(t, "+") {
			if !sawHeader && !sawDate && dateRe.MatchString(t) {
				sawDate = true
				continue
			}
			return Summary{}, unexpected(what, line)
		}
		if isRule(t) {
			if pending != nil {
				return Summary{}, fmt.Errorf("cnmon %s: card %d has no second row before %q", what, pending.Index, t)
			}
			if strings.HasPrefix(t, "|=") && head2 != nil {
				inCards = true
			}
			continue
		}
		c := cells(t)
		if len(c) == 1 {
			switch f := strings.Fields(c[0]); {
			case len(f) >= 2 && f[0] == "CNMON" && !sawHeader:
				sawHeader = true
				s.Version = f[1]
				if len(f) == 4 && f[2] == "Driver" {
					s.Driver = f[3]
				} else if len(f) != 2 {
					return Summary{}, unexpected(what, line)
				}
			case strings.HasPrefix(c[0], "Processes:") && inCards:
				inProcesses = true
			default:
				return Summary{}, unexpected(what, line)
			}
			continue
		}
		if len(c) != 3 || !sawHeader {
			return Summary{}, unexpected(what, line)
		}
		switch {
		case !inCards && head1 == nil && strings.HasPrefix(c[0], "Card"):
			head1 = c
			if strings.Join(strings.Fields(c[0]), " ") != "Card VF Name Firmware" {
				return Summary{}, fmt.Errorf("cnmon %s: unknown column layout %q", what, t)
			}
		case !inCards && head1 != nil && head2 == nil && strings.HasPrefix(c[0], "Fan"):
			head2 = c
		case !inCards:
			return Summary{}, unexpected(what, line)
		case pending == nil:
			card, err := parseSummaryRow1(what, line, c, head1)
			if err != nil {
				return Summary{}, err
			}
			pending = &card
		default:
			if err := parseSummaryRow2(what, line, c, head2, pending); err != nil {
				return Summary{}, err
			}
			for _, seen := range s.Cards {
				if seen.Index == pending.Index {
					return Summary{}, fmt.Errorf("cnmon %s: card %d is listed twice", what, pending.Index)
				}
			}
			s.Cards = append(s.Cards, *pending)
			pending = nil
		}
	}
	if !sawHeader {
		if ne := notExisted(out); ne != "" {
			return Summary{}, fmt.Errorf("cnmon %s: %q", what, ne)
		}
		return Summary{}, fmt.Errorf("cnmon %s: no CNMON header in %q", what, firstLine(out))
	}
	if !inCards {
		return Summary{}, fmt.Errorf("cnmon %s: no card table", what)
	}
	if pending != nil {
		return Summary{}, fmt.Errorf("cnmon %s: card %d has no second row", what, pending.Index)
	}
	return s, nil
}

func parseSummaryRow1(what, line string, c, head []string) (SummaryCard, error) {
	f := strings.Fields(c[0])
	if len(f) != 4 {
		return SummaryCard{}, unexpected(what, line)
	}
	idx, err := atoi(what, line, f[0])
	if err != nil {
		return SummaryCard{}, err
	}
	card := SummaryCard{Index: idx, VF: f[1], Name: f[2], Firmware: f[3]}
	if head[1] == "Bus-Id" {
		if card.BusID = NormalizeBusID(c[1]); card.BusID == "" {
			return SummaryCard{}, fmt.Errorf("cnmon %s: %q in line %q is not a PCI address", what, c[1], strings.TrimSpace(line))
		}
	}
	u := strings.Fields(c[2])
	if len(u) != 2 || !strings.HasSuffix(u[0], "%") {
		return SummaryCard{}, unexpected(what, line)
	}
	card.ECCErrors = u[1]
	return card, nil
}

func parseSummaryRow2(what, line string, c, head []string, card *SummaryCard) error {
	if f := strings.Fields(c[0]); len(f) < 2 || !strings.HasSuffix(f[1], "C") {
		return unexpected(what, line)
	}
	used, total, ok := strings.Cut(c[1], "/")
	if !ok {
		return unexpected(what, line)
	}
	var err error
	if card.MemoryUsedMB, err = mib(what, line, used); err != nil {
		return err
	}
	if card.MemoryTotalMB, err = mib(what, line, total); err != nil {
		return err
	}
	hf := strings.Fields(head[2])
	if len(hf) == 2 && hf[1] == "Compute-Mode" {
		m := strings.Fields(c[2])
		if len(m) != 2 {
			return unexpected(what, line)
		}
		if hf[0] == "Mode" {
			card.Mode = m[0]
		}
		card.ComputeMode = m[1]
	}
	return nil
}

// kvLine is one "key : value" line of cnmon's nested listings, at depth 1
// for four spaces of indentation, 2 for eight and so on.
type kvLine struct {
	depth      int
	key, value string
	path       string
	line       string
}

// block is one "Card N" section of a nested listing.
type block struct {
	card  int
	line  string
	lines []kvLine
}

var cardRe = regexp.MustCompile(`^Card (\d+)$`)

// parseBlocks parses cnmon's nested "Card N" listings ("    %-30s : %s",
// "        %-26s : %s", ...): cnmon info and the sMLU listing. A banner
// line naming CNMON may precede the first card.
func parseBlocks(what string, out []byte) (string, []block, error) {
	var banner string
	var blocks []block
	var stack []string
	for _, line := range lines(out) {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		if strings.Contains(t, "not existed") {
			return "", nil, fmt.Errorf("cnmon %s: %q", what, t)
		}
		if m := cardRe.FindStringSubmatch(t); m != nil && line == strings.TrimLeft(line, " \t") {
			n, err := atoi(what, line, m[1])
			if err != nil {
				return "", nil, err
			}
			blocks = append(blocks, block{card: n, line: t})
			stack = stack[:0]
			continue
		}
		if len(blocks) == 0 {
			if banner == "" && strings.Contains(t, "CNMON") && !strings.Contains(t, ":") {
				banner = strings.Trim(t, "= ")
				continue
			}
			return "", nil, unexpected(what, line)
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		k, v, ok := strings.Cut(t, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" || indent == 0 || indent%4 != 0 || indent/4 > len(stack)+1 {
			return "", nil, unexpected(what, line)
		}
		depth := indent / 4
		stack = append(stack[:depth-1], k)
		b := &blocks[len(blocks)-1]
		b.lines = append(b.lines, kvLine{depth: depth, key: k, value: strings.TrimSpace(v),
			path: strings.Join(stack, "/"), line: line})
	}
	return banner, blocks, nil
}

// ParseInfo parses cnmon info and cnmon info -c N: one record per "Card N"
// section. The product name is required; the bus id is built from the PCI
// section (hexadecimal Domain ID, Bus num, Device, Function).
func ParseInfo(out []byte) ([]Info, error) {
	const what = "info"
	_, blocks, err := parseBlocks(what, out)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("cnmon %s: no Card section in %q", what, firstLine(out))
	}
	var infos []Info
	for _, b := range blocks {
		info := Info{Card: b.card, Fields: map[string]string{}}
		for _, l := range b.lines {
			if _, dup := info.Fields[l.path]; !dup {
				info.Fields[l.path] = l.value
			}
		}
		f := info.Fields
		if info.ProductName = f["Product Name"]; info.ProductName == "" {
			return nil, fmt.Errorf("cnmon %s: %s has no Product Name line", what, b.line)
		}
		info.UUID, info.Firmware, info.Driver, info.ComputeMode = f["UUID"], f["Firmware"], f["Driver"], f["Compute Mode"]
		for _, l := range b.lines {
			var err error
			switch l.path {
			case "Physical Memory Usage/Total":
				info.MemoryTotalMB, err = mib(what, l.line, l.value)
			case "Physical Memory Usage/Used":
				info.MemoryUsedMB, err = mib(what, l.line, l.value)
			}
			if err != nil {
				return nil, err
			}
		}
		if _, ok := f["PCI/Bus num"]; ok {
			bus := fmt.Sprintf("%s:%s:%s.%s", f["PCI/Domain ID"], f["PCI/Bus num"], f["PCI/Device"], f["PCI/Function"])
			if info.BusID = NormalizeBusID(bus); info.BusID == "" {
				return nil, fmt.Errorf("cnmon %s: %s: PCI section gives %q, not a PCI address", what, b.line, bus)
			}
		}
		for _, seen := range infos {
			if seen.Card == info.Card {
				return nil, fmt.Errorf("cnmon %s: card %d is listed twice", what, info.Card)
			}
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// ParseSMLUInfo parses the sMLU listing of one card (see SMLUSyntax):
//
//	Card 0
//	    sMLU Mode                      : Enable
//	    Instance Count                 : 1
//	    Instance                       : 1
//	        Profile ID                 : 3
//	        Profile Name               : 25p.5843mb
//	        UUID                       : 89033010-2354-0000-0001-000000000000
//	        Device Node                : /dev/cambricon-caps/cap_dev0_mi1
//	        MLU Quota                  : 25 %
//	        Memory                     : 5843 MiB
func ParseSMLUInfo(out []byte) (SMLUInfo, error) {
	const what = "smlu"
	_, blocks, err := parseBlocks(what, out)
	if err != nil {
		return SMLUInfo{}, err
	}
	if len(blocks) != 1 {
		return SMLUInfo{}, fmt.Errorf("cnmon %s: %d Card sections, want one, in %q", what, len(blocks), firstLine(out))
	}
	b := blocks[0]
	info := SMLUInfo{Card: b.card}
	count, sawMode := -1, false
	var cur *SMLU
	for _, l := range b.lines {
		var err error
		switch {
		case l.depth == 1 && l.key == "sMLU Mode":
			switch l.value {
			case "Enable":
				info.Enabled = true
			case "Disable":
			default:
				return SMLUInfo{}, unexpected(what, l.line)
			}
			sawMode = true
		case l.depth == 1 && l.key == "Instance Count":
			count, err = atoi(what, l.line, l.value)
		case l.depth == 1 && l.key == "Instance":
			info.Instances = append(info.Instances, SMLU{Card: b.card})
			cur = &info.Instances[len(info.Instances)-1]
			cur.ID, err = atoi(what, l.line, l.value)
		case l.depth == 2 && cur != nil && strings.HasPrefix(l.path, "Instance/"):
			switch l.key {
			case "Profile ID":
				cur.ProfileID, err = atoi(what, l.line, l.value)
			case "Profile Name":
				cur.ProfileName = l.value
			case "UUID":
				cur.UUID = l.value
			case "Device Node":
				cur.DeviceNode = l.value
			case "MLU Quota":
				cur.VCorePercent, err = percent(what, l.line, l.value)
			case "Memory":
				cur.MemoryMB, err = mib(what, l.line, l.value)
			default:
				return SMLUInfo{}, unexpected(what, l.line)
			}
		default:
			return SMLUInfo{}, unexpected(what, l.line)
		}
		if err != nil {
			return SMLUInfo{}, err
		}
	}
	if !sawMode {
		return SMLUInfo{}, fmt.Errorf("cnmon %s: Card %d has no sMLU Mode line", what, b.card)
	}
	if count >= 0 && count != len(info.Instances) {
		return SMLUInfo{}, fmt.Errorf("cnmon %s: Instance Count is %d but %d instances are listed", what, count, len(info.Instances))
	}
	for _, s := range info.Instances {
		if s.DeviceNode == "" || s.MemoryMB == 0 || s.VCorePercent == 0 {
			return SMLUInfo{}, fmt.Errorf("cnmon %s: instance %d of card %d lacks its device node, quota or memory", what, s.ID, b.card)
		}
	}
	return info, nil
}

var (
	createdRe   = regexp.MustCompile(`(?m)^Create sMLU instance (\d+) on card (\d+) success\s*$`)
	destroyedRe = regexp.MustCompile(`(?m)^Destroy sMLU instance (\d+) on card (\d+) success\s*$`)
)

// commandFailure quotes the first non-blank line of a refused command.
func commandFailure(what string, out []byte) error {
	if fl := firstLine(out); fl != "" {
		return fmt.Errorf("cnmon %s failed: %q", what, fl)
	}
	return fmt.Errorf("cnmon %s failed: no output", what)
}

// ParseCreateSMLU checks the output of an sMLU creation and returns the
// card and instance id it reports.
func ParseCreateSMLU(out []byte) (card, id int, err error) {
	m := createdRe.FindSubmatch(out)
	if m == nil {
		return -1, -1, commandFailure("smlu create", out)
	}
	return reportedIDs("smlu create", m)
}

// ParseDestroySMLU checks the output of an sMLU destruction and returns
// the card and instance id it reports destroyed.
func ParseDestroySMLU(out []byte) (card, id int, err error) {
	m := destroyedRe.FindSubmatch(out)
	if m == nil {
		return -1, -1, commandFailure("smlu destroy", out)
	}
	return reportedIDs("smlu destroy", m)
}

// reportedIDs reads the instance id and card of an sMLU command's report.
func reportedIDs(what string, m [][]byte) (card, id int, err error) {
	id, err = strconv.Atoi(string(m[1]))
	if err != nil {
		return -1, -1, fmt.Errorf("cnmon %s: instance id %q: %w", what, m[1], err)
	}
	card, err = strconv.Atoi(string(m[2]))
	if err != nil {
		return -1, -1, fmt.Errorf("cnmon %s: card %q: %w", what, m[2], err)
	}
	return card, id, nil
}
