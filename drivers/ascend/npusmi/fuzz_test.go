package npusmi

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// addCaptures seeds f with every recorded npu-smi output of testdata: the
// parsers are fuzzed from what the tool really prints.
func addCaptures(f *testing.F) {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.txt"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no npu-smi captures under testdata: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// sameOnCRLF checks that a parser reads an output with Windows line ends
// (npu-smi through some remote shells) as it reads the original.
func sameOnCRLF[T any](t *testing.T, what string, out []byte, parse func([]byte) (T, error)) {
	t.Helper()
	if bytes.IndexByte(out, '\r') >= 0 {
		return
	}
	a, errA := parse(out)
	b, errB := parse(bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n")))
	if (errA == nil) != (errB == nil) || (errA == nil && !reflect.DeepEqual(a, b)) {
		t.Errorf("%s: CRLF line ends change the result: %+v, %v vs %+v, %v", what, a, errA, b, errB)
	}
}

// FuzzParseKeyValueOutputs: the "key : value" outputs (info -l, board,
// memory, common) either fail or give ids and sizes a node can have:
// none negative, none listed twice, bus ids in the kernel's form.
func FuzzParseKeyValueOutputs(f *testing.F) {
	addCaptures(f)
	f.Fuzz(func(t *testing.T, out []byte) {
		if cards, err := ParseList(out); err == nil {
			seen := map[int]bool{}
			for _, c := range cards {
				if c.ID < 0 || c.ChipCount < 0 {
					t.Errorf("info -l: card %+v has a negative id or chip count", c)
				}
				if seen[c.ID] {
					t.Errorf("info -l: NPU ID %d listed twice", c.ID)
				}
				seen[c.ID] = true
			}
		}
		if b, err := ParseBoard(out); err == nil {
			if b.Card < 0 || b.Chip < -1 {
				t.Errorf("board: card %d chip %d", b.Card, b.Chip)
			}
			if b.BusID != "" && (NormalizeBusID(b.BusID) != b.BusID || !busIDRe.MatchString(b.BusID)) {
				t.Errorf("board: bus id %q is not in the kernel's form", b.BusID)
			}
			if len(b.Fields) == 0 || b.ChipType != b.Fields["Chip Type"] || b.ChipName != b.Fields["Chip Name"] {
				t.Errorf("board: fields %v disagree with %+v", b.Fields, b)
			}
		}
		if m, err := ParseMemory(out); err == nil && (m.HBMCapacityMB < 0 || m.DDRCapacityMB < 0) {
			t.Errorf("memory: negative capacity %+v", m)
		}
		if chips, err := ParseCommon(out); err == nil {
			seen := map[int]bool{}
			for _, c := range chips {
				if c.Chip < 0 || c.AICoreCount < 0 {
					t.Errorf("common: chip %+v has a negative id or core count", c)
				}
				if seen[c.Chip] {
					t.Errorf("common: Chip ID %d listed twice", c.Chip)
				}
				seen[c.Chip] = true
			}
		}
		if n := NormalizeBusID(string(out)); n != "" && NormalizeBusID(n) != n {
			t.Errorf("NormalizeBusID(%q) = %q is not a fixed point", out, n)
		}
		sameOnCRLF(t, "info -l", out, ParseList)
		sameOnCRLF(t, "board", out, ParseBoard)
		sameOnCRLF(t, "memory", out, ParseMemory)
		sameOnCRLF(t, "common", out, ParseCommon)
	})
}

// FuzzParseTables: the tabular outputs (info -m, template-info,
// info-vnpu) either fail or give what the plugin can publish: no
// negative sizes, no chip or vNPU twice, free never above total.
func FuzzParseTables(f *testing.F) {
	addCaptures(f)
	f.Fuzz(func(t *testing.T, out []byte) {
		if entries, err := ParseMapping(out); err == nil {
			chips, logic := map[[2]int]bool{}, map[int]bool{}
			for _, e := range entries {
				if e.Card < 0 || e.Chip < 0 || e.LogicID < -1 || e.PhyID < -1 || e.Name == "" {
					t.Errorf("info -m: entry %+v", e)
				}
				if k := [2]int{e.Card, e.Chip}; chips[k] {
					t.Errorf("info -m: NPU %d chip %d listed twice", e.Card, e.Chip)
				} else {
					chips[k] = true
				}
				if e.IsNPU() {
					if logic[e.LogicID] {
						t.Errorf("info -m: logic id %d listed twice", e.LogicID)
					}
					logic[e.LogicID] = true
				}
			}
		}
		if tmpls, err := ParseTemplates(out); err == nil {
			names := map[string]bool{}
			for _, tm := range tmpls {
				if tm.Name == "" || tm.AICores < 0 || tm.MemoryMB < 0 || tm.AICPU < 0 || tm.VPC < 0 || tm.VDEC < 0 ||
					tm.JPEGD < 0 || tm.PNGD < 0 || tm.VENC < 0 || tm.JPEGE < 0 {
					t.Errorf("template-info: template %+v has a negative resource", tm)
				}
				if names[tm.Name] {
					t.Errorf("template-info: template %s listed twice", tm.Name)
				}
				names[tm.Name] = true
			}
		}
		if info, err := ParseVNPUInfo(out); err == nil {
			for col, r := range info.Resources {
				if r.NA && (r.Free != 0 || r.Total != 0) || r.Free < 0 || r.Total < 0 || r.Free > r.Total {
					t.Errorf("info-vnpu: resource %s = %+v", col, r)
				}
			}
			ids := map[int]bool{}
			for _, v := range info.VNPUs {
				if v.ID < 0 || v.VGroup < -1 {
					t.Errorf("info-vnpu: vNPU %+v", v)
				}
				if ids[v.ID] {
					t.Errorf("info-vnpu: vNPU %d listed twice", v.ID)
				}
				ids[v.ID] = true
			}
		}
		sameOnCRLF(t, "info -m", out, ParseMapping)
		sameOnCRLF(t, "template-info", out, ParseTemplates)
		sameOnCRLF(t, "info-vnpu", out, ParseVNPUInfo)
	})
}

// printedID is the id text a set command's message carries, without
// leading zeros, "" for none.
func printedID(re interface{ FindSubmatch([]byte) [][]byte }, out []byte) string {
	m := re.FindSubmatch(out)
	if m == nil || len(m[1]) == 0 {
		return ""
	}
	if s := strings.TrimLeft(string(m[1]), "0"); s != "" {
		return s
	}
	return "0"
}

// FuzzParseSetOutputs: a create or destroy is reported done only when
// npu-smi said so, and the id returned is the one it printed.
func FuzzParseSetOutputs(f *testing.F) {
	addCaptures(f)
	f.Fuzz(func(t *testing.T, out []byte) {
		if id, err := ParseCreateVNPU(out); err == nil {
			printed := printedID(createdRe, out)
			if !statusOKRe.Match(out) || (printed == "" && id != -1) || (printed != "" && strconv.Itoa(id) != printed) {
				t.Errorf("create-vnpu: id %d from %q", id, out)
			}
		}
		if id, err := ParseDestroyVNPU(out); err == nil {
			if !statusOKRe.Match(out) || strconv.Itoa(id) != printedID(destroyedRe, out) {
				t.Errorf("destroy-vnpu: id %d from %q", id, out)
			}
		}
	})
}
