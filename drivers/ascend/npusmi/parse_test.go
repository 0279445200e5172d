package npusmi

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	dir910B3 = "testdata/atlas800t-a2-910b3"
	dir910A  = "testdata/atlas800-9000-910a"
)

func read(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// machines describes what the recorded outputs of each server hold.
var machines = []struct {
	dir     string
	name    string
	mcu     bool
	busIDs  []string
	hbmMB   int64
	aiCores int
}{
	{dir910B3, "910B3", true,
		[]string{"0000:c1:00.0", "0000:c2:00.0", "0000:81:00.0", "0000:82:00.0", "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"},
		65536, 20},
	{dir910A, "910A", false,
		[]string{"0000:c1:00.0", "0000:81:00.0", "0000:41:00.0", "0000:01:00.0", "0000:c2:00.0", "0000:82:00.0", "0000:42:00.0", "0000:02:00.0"},
		32768, 32},
}

func TestParseListTestdata(t *testing.T) {
	for _, m := range machines {
		cards, err := ParseList(read(t, m.dir, "info-l.txt"))
		if err != nil {
			t.Fatalf("%s: %v", m.dir, err)
		}
		if len(cards) != 8 {
			t.Fatalf("%s: %d cards", m.dir, len(cards))
		}
		for i, c := range cards {
			if c != (Card{ID: i, ChipCount: 1}) {
				t.Errorf("%s: card %d = %+v", m.dir, i, c)
			}
		}
	}
}

func TestParseMappingTestdata(t *testing.T) {
	for _, m := range machines {
		entries, err := ParseMapping(read(t, m.dir, "info-m.txt"))
		if err != nil {
			t.Fatalf("%s: %v", m.dir, err)
		}
		var want []MappingEntry
		for i := 0; i < 8; i++ {
			want = append(want, MappingEntry{Card: i, Chip: 0, LogicID: i, PhyID: -1, Name: "Ascend " + m.name})
			if m.mcu {
				want = append(want, MappingEntry{Card: i, Chip: 1, LogicID: -1, PhyID: -1, Name: "Mcu"})
			}
		}
		if !reflect.DeepEqual(entries, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", m.dir, entries, want)
		}
		if entries[0].IsNPU() != true || (m.mcu && entries[1].IsNPU()) {
			t.Errorf("%s: IsNPU wrong", m.dir)
		}
	}
}

func TestParseMappingPhyIDColumn(t *testing.T) {
	// The A3 layout (print_mapping_info_910_93): an extra Chip Phy-ID column.
	out := "\tNPU ID                         Chip ID                        Chip Logic ID                  Chip Phy-ID                    Chip Name                     \n" +
		"\t0                              0                              0                              0                              Ascend910\n" +
		"\t0                              1                              1                              1                              Ascend910\n" +
		"\t0                              2                              -                              -                              Mcu                           \n" +
		"\t1                              0                              2                              4                              Ascend910\n"
	entries, err := ParseMapping([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []MappingEntry{
		{0, 0, 0, 0, "Ascend910"}, {0, 1, 1, 1, "Ascend910"}, {0, 2, -1, -1, "Mcu"}, {1, 0, 2, 4, "Ascend910"},
	}
	if !reflect.DeepEqual(entries, want) {
		t.Errorf("got %+v", entries)
	}
}

func TestParseBoardTestdata(t *testing.T) {
	for _, m := range machines {
		for i := 0; i < 8; i++ {
			b, err := ParseBoard(read(t, m.dir, "board-i"+itoa(i)+"-c0.txt"))
			if err != nil {
				t.Fatalf("%s card %d: %v", m.dir, i, err)
			}
			if b.Card != i || b.Chip != 0 || b.ChipType != "Ascend" || b.ChipName != m.name || b.BusID != m.busIDs[i] {
				t.Errorf("%s card %d: %+v", m.dir, i, b)
			}
			if b.Fields["Chip Position ID"] != itoa(i) {
				t.Errorf("%s card %d: fields %v", m.dir, i, b.Fields)
			}
		}
		b, err := ParseBoard(read(t, m.dir, "board-i0.txt"))
		if err != nil {
			t.Fatalf("%s card board: %v", m.dir, err)
		}
		if b.Card != 0 || b.Chip != -1 || b.ChipName != "" || b.BusID != m.busIDs[0] || b.Fields["Chip Count"] != "1" || b.Fields["PCI Vendor ID"] != "0x19E5" {
			t.Errorf("%s card board: %+v", m.dir, b)
		}
	}
}

func TestParseMemoryTestdata(t *testing.T) {
	ddr910A := []int64{14795, 15177, 15177, 15088, 14795, 15177, 15177, 15088}
	for _, m := range machines {
		for i := 0; i < 8; i++ {
			mem, err := ParseMemory(read(t, m.dir, "memory-i"+itoa(i)+"-c0.txt"))
			if err != nil {
				t.Fatalf("%s card %d: %v", m.dir, i, err)
			}
			want := Memory{HBMCapacityMB: m.hbmMB}
			if m.name == "910A" {
				want.DDRCapacityMB = ddr910A[i]
			}
			if mem != want {
				t.Errorf("%s card %d: %+v, want %+v", m.dir, i, mem, want)
			}
		}
	}
}

func TestParseCommonTestdata(t *testing.T) {
	for _, m := range machines {
		for i := 0; i < 8; i++ {
			cs, err := ParseCommon(read(t, m.dir, "common-i"+itoa(i)+".txt"))
			if err != nil {
				t.Fatalf("%s card %d: %v", m.dir, i, err)
			}
			if want := []CommonChip{{Chip: 0, AICoreCount: m.aiCores}}; !reflect.DeepEqual(cs, want) {
				t.Errorf("%s card %d: %+v", m.dir, i, cs)
			}
		}
	}
}

func TestParseTemplatesTestdata(t *testing.T) {
	got, err := ParseTemplates(read(t, dir910B3, "template-info.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Template{
		{Name: "vir10_3c_32g", AICores: 10, MemoryMB: 32768, AICPU: 3, VPC: 4, VENC: 0, JPEGD: 12, PNGD: 0, VDEC: 1, JPEGE: 2},
		{Name: "vir05_1c_16g", AICores: 5, MemoryMB: 16384, AICPU: 1, VPC: 2, VENC: 0, JPEGD: 6, PNGD: 0, VDEC: 0, JPEGE: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("910B3:\n got %+v\nwant %+v", got, want)
	}

	got, err = ParseTemplates(read(t, dir910A, "template-info.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want = []Template{
		{Name: "vir02", AICores: 2, MemoryMB: 2048, AICPU: 1, VPC: 1, JPEGD: 1, PNGD: 1, VDEC: 1, JPEGE: 0},
		{Name: "vir04", AICores: 4, MemoryMB: 4096, AICPU: 1, VPC: 2, JPEGD: 2, PNGD: 3, VDEC: 2, JPEGE: 1},
		{Name: "vir08", AICores: 8, MemoryMB: 8192, AICPU: 3, VPC: 4, JPEGD: 4, PNGD: 6, VDEC: 4, JPEGE: 2},
		{Name: "vir16", AICores: 16, MemoryMB: 16384, AICPU: 7, VPC: 8, JPEGD: 8, PNGD: 12, VDEC: 8, JPEGE: 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("910A:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseTemplatesVariants(t *testing.T) {
	// An older layout frames the header with "+====+", and captures come
	// with trailing blanks and a shell prompt's blank lines.
	out := "\n+------------------------------------------------------------------------------------------+  \n" +
		"|NPU instance template info is:                                                            |\n" +
		"|Name                AICORE    Memory    AICPU     VPC            VENC           JPEGD     |\n" +
		"|                               GB                 PNGD           VDEC           JPEGE     |\n" +
		"+==========================================================================================+\n" +
		"|vir01               1         3         1         1              0              2         | \n" +
		"|                                                  0              1              1         |\n" +
		"+------------------------------------------------------------------------------------------+\n\n"
	got, err := ParseTemplates([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []Template{{Name: "vir01", AICores: 1, MemoryMB: 3072, AICPU: 1, VPC: 1, JPEGD: 2, VDEC: 1, JPEGE: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v", got)
	}
}

func TestParseVNPUInfoTestdata(t *testing.T) {
	cases := []struct {
		dir, file string
		res       map[string]Resource
		vnpus     []VNPU
	}{
		{dir910B3, "info-vnpu-i0-c0-empty.txt", map[string]Resource{
			"AICORE": {20, 20, false}, "Memory": {60, 64, false}, "AICPU": {6, 6, false}, "VPC": {9, 9, false},
			"VENC": {0, 0, false}, "VDEC": {2, 2, false}, "JPEGD": {24, 24, false}, "JPEGE": {4, 4, false}, "PNGD": {NA: true}}, nil},
		{dir910B3, "info-vnpu-i0-c0-two.txt", map[string]Resource{
			"AICORE": {5, 20, false}, "Memory": {12, 64, false}, "AICPU": {3, 7, false}, "VPC": {3, 9, false},
			"VENC": {0, 0, false}, "VDEC": {1, 2, false}, "JPEGD": {6, 24, false}, "JPEGE": {1, 4, false}, "PNGD": {NA: true}},
			[]VNPU{{ID: 100, Template: "vir10_3c_32g", VGroup: 0, ContainerID: "000000000000"},
				{ID: 101, Template: "vir05_1c_16g", VGroup: 1, ContainerID: "000000000000"}}},
		{dir910A, "info-vnpu-i0-c0-empty.txt", map[string]Resource{
			"AICORE": {32, 32, false}, "Memory": {32, 32, false}, "AICPU": {NA: true}, "VPC": {16, 16, false},
			"VENC": {NA: true}, "VDEC": {16, 16, false}, "JPEGD": {16, 16, false}, "JPEGE": {8, 8, false}, "PNGD": {24, 24, false}}, nil},
		{dir910A, "info-vnpu-i0-c0-two.txt", map[string]Resource{
			"AICORE": {8, 32, false}, "Memory": {8, 32, false}, "AICPU": {NA: true}, "VPC": {4, 16, false},
			"VENC": {NA: true}, "VDEC": {4, 16, false}, "JPEGD": {4, 16, false}, "JPEGE": {2, 8, false}, "PNGD": {6, 24, false}},
			[]VNPU{{ID: 100, Template: "vir16", VGroup: -1, ContainerID: "000000000000"},
				{ID: 101, Template: "vir08", VGroup: -1, ContainerID: "000000000000"}}},
	}
	for _, c := range cases {
		info, err := ParseVNPUInfo(read(t, c.dir, c.file))
		if err != nil {
			t.Fatalf("%s/%s: %v", c.dir, c.file, err)
		}
		if !reflect.DeepEqual(info.Resources, c.res) {
			t.Errorf("%s/%s resources:\n got %+v\nwant %+v", c.dir, c.file, info.Resources, c.res)
		}
		if !reflect.DeepEqual(info.VNPUs, c.vnpus) {
			t.Errorf("%s/%s vNPUs:\n got %+v\nwant %+v", c.dir, c.file, info.VNPUs, c.vnpus)
		}
	}
}

func TestParseVNPUInfoInUse(t *testing.T) {
	out := strings.Replace(string(read(t, dir910B3, "info-vnpu-i0-c0-two.txt")),
		"|  100      |  0             |  000000000000  |  0       |",
		"|  100      |  0             |  ffffffffffff  |  1       |", 1)
	info, err := ParseVNPUInfo([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if v := info.VNPUs[0]; !v.InUse || v.ContainerID != "ffffffffffff" || info.VNPUs[1].InUse {
		t.Errorf("got %+v", info.VNPUs)
	}
}

func TestParseSetOutputs(t *testing.T) {
	for _, dir := range []string{dir910B3, dir910A} {
		id, err := ParseCreateVNPU(read(t, dir, "create-vnpu-ok.txt"))
		if err != nil || id != -1 {
			t.Errorf("%s create: %d, %v", dir, id, err)
		}
		id, err = ParseDestroyVNPU(read(t, dir, "destroy-vnpu-100-ok.txt"))
		if err != nil || id != 100 {
			t.Errorf("%s destroy: %d, %v", dir, id, err)
		}
		if _, err := ParseDestroyVNPU(read(t, dir, "create-vnpu-ok.txt")); err == nil {
			t.Errorf("%s: create output taken for a destroy", dir)
		}
	}
	// Huawei's documentation renders both lines as one.
	if _, err := ParseCreateVNPU([]byte("        Status : OK         Message : Create vnpu success\n")); err != nil {
		t.Errorf("one-line create: %v", err)
	}
	if id, err := ParseCreateVNPU([]byte("\tStatus                         : OK\n\tMessage                        : Create vnpu 117 success\n")); err != nil || id != 117 {
		t.Errorf("create with id: %d, %v", id, err)
	}
	refusals := map[string]string{
		"create-vnpu-insufficient-cores.txt": "Insufficient number of cores available, unallocated cores number:5.000000.",
		"create-vnpu-failed.txt":             "create vnpu failed.",
		"create-vnpu-unknown-template.txt":   "Usage: npu-smi set -t create-vnpu [Options...]",
	}
	for file, line := range refusals {
		_, err := ParseCreateVNPU(read(t, dir910B3, file))
		if err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("%s: %v, want the error to quote %q", file, err, line)
		}
	}
	if _, err := ParseDestroyVNPU(read(t, dir910B3, "destroy-vnpu-unknown-id.txt")); err == nil ||
		!strings.Contains(err.Error(), "Error parameter of -v.") {
		t.Errorf("destroy unknown id: %v", err)
	}
	if _, err := ParseCreateVNPU(nil); err == nil {
		t.Error("empty create output accepted")
	}
}

func TestParsersQuoteUnexpectedLines(t *testing.T) {
	const msg = "This device does not support querying template-info."
	cases := map[string]func([]byte) error{
		"list":      func(b []byte) error { _, err := ParseList(b); return err },
		"mapping":   func(b []byte) error { _, err := ParseMapping(b); return err },
		"board":     func(b []byte) error { _, err := ParseBoard(b); return err },
		"memory":    func(b []byte) error { _, err := ParseMemory(b); return err },
		"common":    func(b []byte) error { _, err := ParseCommon(b); return err },
		"templates": func(b []byte) error { _, err := ParseTemplates(b); return err },
		"info-vnpu": func(b []byte) error { _, err := ParseVNPUInfo(b); return err },
	}
	for name, parse := range cases {
		err := parse([]byte(msg + "\n"))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want the error to quote the line", name, err)
		}
	}

	// A garbled row in the middle of a table is quoted too.
	bad := strings.Replace(string(read(t, dir910B3, "template-info.txt")), "|vir05_1c_16g        5 ", "|vir05_1c_16g        x ", 1)
	if _, err := ParseTemplates([]byte(bad)); err == nil || !strings.Contains(err.Error(), "vir05_1c_16g        x") {
		t.Errorf("garbled template row: %v", err)
	}
	bad = strings.Replace(string(read(t, dir910B3, "info-vnpu-i0-c0-two.txt")), "|  101      |", "|  1o1      |", 1)
	if _, err := ParseVNPUInfo([]byte(bad)); err == nil || !strings.Contains(err.Error(), "1o1") {
		t.Errorf("garbled vNPU row: %v", err)
	}
	bad = strings.Replace(string(read(t, dir910B3, "info-vnpu-i0-c0-two.txt")), "| Total number of vnpu: 2 ", "| Total number of vnpu: 3 ", 1)
	if _, err := ParseVNPUInfo([]byte(bad)); err == nil {
		t.Error("vNPU count mismatch accepted")
	}
	bad = string(read(t, dir910B3, "info-m.txt")) + "\tsomething else entirely\n"
	if _, err := ParseMapping([]byte(bad)); err == nil || !strings.Contains(err.Error(), "something else entirely") {
		t.Errorf("garbled mapping row: %v", err)
	}
	bad = strings.Replace(string(read(t, dir910B3, "info-l.txt")), "Total Count                    : 8", "Total Count                    : 9", 1)
	if _, err := ParseList([]byte(bad)); err == nil {
		t.Error("card count mismatch accepted")
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:C1:00.0": "0000:c1:00.0", " 0000:0C:00.0 ": "0000:0c:00.0", "NA": "", "": "", "C1:00.0": "",
	} {
		if got := NormalizeBusID(in); got != want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVNPUDevicePath(t *testing.T) {
	if got := VNPUDevicePath(116); got != "/dev/vdavinci116" {
		t.Error(got)
	}
}
