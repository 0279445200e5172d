package cnmon

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	dirX8    = "testdata/mlu370-x8-8boards"
	captures = "testdata/captures"
)

func read(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// x8BusIDs are the recorded server's cards, two per board.
var x8BusIDs = []string{
	"0000:13:00.0", "0000:16:00.0", "0000:39:00.0", "0000:3d:00.0",
	"0000:4f:00.0", "0000:53:00.0", "0000:6f:00.0", "0000:73:00.0",
	"0000:94:00.0", "0000:98:00.0", "0000:b8:00.0", "0000:bc:00.0",
	"0000:ce:00.0", "0000:d2:00.0", "0000:ee:00.0", "0000:f2:00.0",
}

func x8UUID(i int) string {
	return strings.Replace("890330XX-2354-0000-0000-000000000000", "XX", itoa(10+i), 1)
}

func TestParseSummaryTestdata(t *testing.T) {
	s, err := ParseSummary(read(t, dirX8, "cnmon.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != "v5.10.31" || s.Driver != "v5.10.31" || len(s.Cards) != 16 {
		t.Fatalf("got %+v", s)
	}
	for i, c := range s.Cards {
		want := SummaryCard{Index: i, VF: "/", Name: "MLU370-X8", Firmware: "v1.1.6", BusID: x8BusIDs[i],
			ECCErrors: "N/A", MemoryTotalMB: 23374, Mode: "FULL", ComputeMode: "Default"}
		if c != want {
			t.Errorf("card %d:\n got %+v\nwant %+v", i, c, want)
		}
	}
}

// TestParseSummaryCaptures parses cnmon tables captured on real machines
// (see testdata/README.md).
func TestParseSummaryCaptures(t *testing.T) {
	cases := []struct {
		file, version, driver string
		cards                 []SummaryCard
	}{
		{"cnmon-v5.10.22-mlu370-x8.txt", "v5.10.22", "v5.10.22", []SummaryCard{
			{0, "/", "MLU370-X8", "v1.1.6", "0000:13:00.0", "0", 0, 20638, "FULL", "Default"},
			{1, "/", "MLU370-X8", "v1.1.6", "0000:16:00.0", "0", 0, 20638, "FULL", "Default"}}},
		{"cnmon-v5.10.13-mlu370-x8.txt", "v5.10.13", "v5.10.13", []SummaryCard{
			{0, "/", "MLU370-X8", "v1.1.6", "0000:39:00.0", "N/A", 0, 23374, "", "Default"},
			{1, "/", "MLU370-X8", "v1.1.6", "0000:3d:00.0", "N/A", 0, 23374, "", "Default"}}},
		{"cnmon-v5.10.10-mlu370-x4.txt", "v5.10.10", "v5.10.10", []SummaryCard{
			{0, "/", "MLU370-X4", "v1.1.6", "0000:1b:00.0", "N/A", 0, 23308, "", "Exclusive"},
			{1, "/", "MLU370-X4", "v1.1.6", "0000:36:00.0", "N/A", 0, 23308, "", "Exclusive"}}},
		{"cnmon-v4.20.11-mlu370-x4.txt", "v4.20.11", "", []SummaryCard{
			{0, "/", "MLU370-X4", "v1.1.6", "", "N/A", 0, 23308, "", ""},
			{1, "/", "MLU370-X4", "v1.1.6", "", "N/A", 0, 23308, "", ""},
			{2, "/", "MLU370-X4", "v1.1.6", "", "N/A", 0, 23308, "", ""}}},
	}
	for _, c := range cases {
		s, err := ParseSummary(read(t, captures, c.file))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if s.Version != c.version || s.Driver != c.driver || !reflect.DeepEqual(s.Cards, c.cards) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.file, s, c.cards)
		}
	}
}

func TestParseSummaryUsedMemoryAndOneCard(t *testing.T) {
	out := strings.Replace(string(read(t, dirX8, "cnmon.txt")), "|     0 MiB/ 23374 MiB | FULL          Default |",
		"| 15829 MiB/ 23374 MiB | FULL        Exclusive |", 1)
	s, err := ParseSummary([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Cards[0]; c.MemoryUsedMB != 15829 || c.ComputeMode != "Exclusive" || s.Cards[1].MemoryUsedMB != 0 {
		t.Errorf("got %+v", s.Cards[:2])
	}
}

func TestParseInfoTestdata(t *testing.T) {
	for i := 0; i < 16; i++ {
		infos, err := ParseInfo(read(t, dirX8, "info-c"+itoa(i)+".txt"))
		if err != nil {
			t.Fatalf("card %d: %v", i, err)
		}
		if len(infos) != 1 {
			t.Fatalf("card %d: %d records", i, len(infos))
		}
		in := infos[0]
		if in.Card != i || in.ProductName != "MLU370-X8" || in.UUID != x8UUID(i) || in.Firmware != "v1.1.6" ||
			in.Driver != "v5.10.31" || in.ComputeMode != "Default" || in.BusID != x8BusIDs[i] ||
			in.MemoryTotalMB != 23374 || in.MemoryUsedMB != 0 {
			t.Errorf("card %d: %+v", i, in)
		}
		if in.Fields["Health State/Driver"] != "Running" || in.Fields["Power/Cap"] != "250 W" || in.Fields["Driver"] != "v5.10.31" {
			t.Errorf("card %d fields: %v", i, in.Fields)
		}
	}
}

func TestParseInfoSeveralCards(t *testing.T) {
	// cnmon info without -c prints every card under one banner.
	second := strings.SplitN(string(read(t, dirX8, "info-c5.txt")), "\n", 2)[1]
	out := string(read(t, dirX8, "info-c4.txt")) + second
	infos, err := ParseInfo([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Card != 4 || infos[1].Card != 5 || infos[1].BusID != "0000:53:00.0" {
		t.Errorf("got %+v", infos)
	}
}

func TestParseInfoVariants(t *testing.T) {
	// The key/value lines of a real MLU370-X8 (testdata README), under a
	// Card line and without a banner.
	out := "Card 0\n" +
		"    Product Name                   : MLU370-X8\n" +
		"    Firmware                       : v1.1.6\n" +
		"    Driver                         : v5.10.26\n" +
		"    Compute Mode                   : Default\n"
	infos, err := ParseInfo([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if in := infos[0]; in.ProductName != "MLU370-X8" || in.Driver != "v5.10.26" || in.BusID != "" || in.MemoryTotalMB != 0 {
		t.Errorf("got %+v", in)
	}
	// A card running a process: a third level of indentation.
	out = string(read(t, dirX8, "info-c0.txt")) +
		"    Processes                      :\n" +
		"        Process                    : 0\n" +
		"            PID                    : 101934\n" +
		"            cmdline                : /torch/venv3/pytorch_infer/bin/python\n" +
		"            MLU Memory Usage       : 15829 MiB\n"
	out = strings.Replace(out, "        Used                       : 0 MiB", "        Used                       : 15829 MiB", 1)
	infos, err = ParseInfo([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if in := infos[0]; in.MemoryUsedMB != 15829 || in.Fields["Processes/Process/PID"] != "101934" {
		t.Errorf("got %+v", in)
	}
}

func TestParseSMLUInfoTestdata(t *testing.T) {
	off, err := ParseSMLUInfo(read(t, dirX8, "smlu-info-c0-disabled.txt"))
	if err != nil || off.Card != 0 || off.Enabled || len(off.Instances) != 0 {
		t.Errorf("disabled: %+v, %v", off, err)
	}
	empty, err := ParseSMLUInfo(read(t, dirX8, "smlu-info-c0-empty.txt"))
	if err != nil || !empty.Enabled || len(empty.Instances) != 0 {
		t.Errorf("empty: %+v, %v", empty, err)
	}
	two, err := ParseSMLUInfo(read(t, dirX8, "smlu-info-c0-two.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []SMLU{
		{Card: 0, ID: 1, ProfileID: 2, ProfileName: "25p.5843mb", UUID: "89033010-2354-0000-0001-000000000000",
			DeviceNode: "/dev/cambricon-caps/cap_dev0_mi1", VCorePercent: 25, MemoryMB: 5843},
		{Card: 0, ID: 2, ProfileID: 3, ProfileName: "50p.8192mb", UUID: "89033010-2354-0000-0002-000000000000",
			DeviceNode: "/dev/cambricon-caps/cap_dev0_mi2", VCorePercent: 50, MemoryMB: 8192},
	}
	if !two.Enabled || !reflect.DeepEqual(two.Instances, want) {
		t.Errorf("two:\n got %+v\nwant %+v", two.Instances, want)
	}
	for _, s := range two.Instances {
		if s.DeviceNode != SMLUDevicePath(s.Card, s.ID) || s.ProfileName != SMLUProfileName(s.VCorePercent, s.MemoryMB) {
			t.Errorf("instance %d: %+v", s.ID, s)
		}
	}
}

func TestParseSetOutputs(t *testing.T) {
	card, id, err := ParseCreateSMLU(read(t, dirX8, "smlu-create-ok.txt"))
	if err != nil || card != 0 || id != 1 {
		t.Errorf("create: %d %d %v", card, id, err)
	}
	card, id, err = ParseDestroySMLU(read(t, dirX8, "smlu-destroy-1-ok.txt"))
	if err != nil || card != 0 || id != 1 {
		t.Errorf("destroy: %d %d %v", card, id, err)
	}
	if _, _, err := ParseDestroySMLU(read(t, dirX8, "smlu-create-ok.txt")); err == nil {
		t.Error("create output taken for a destroy")
	}
	refusals := map[string]string{
		"smlu-create-insufficient-quota.txt":  "insufficient MLU quota, request 50%, remain 25%",
		"smlu-create-insufficient-memory.txt": "insufficient memory, request 12000 MiB, remain 9339 MiB",
		"smlu-create-disabled.txt":            "sMLU mode is disabled",
	}
	for file, text := range refusals {
		if _, _, err := ParseCreateSMLU(read(t, dirX8, file)); err == nil || !strings.Contains(err.Error(), text) {
			t.Errorf("%s: %v, want the error to quote %q", file, err, text)
		}
	}
	if _, _, err := ParseDestroySMLU(read(t, dirX8, "smlu-destroy-unknown.txt")); err == nil ||
		!strings.Contains(err.Error(), "instance 7 on card 0 failed: instance not found") {
		t.Errorf("destroy unknown: %v", err)
	}
	if _, _, err := ParseCreateSMLU(nil); err == nil || !strings.Contains(err.Error(), "no output") {
		t.Errorf("empty create output: %v", err)
	}
}

func TestParsersQuoteUnexpectedLines(t *testing.T) {
	const msg = "Init CNDev failed, please check the driver."
	cases := map[string]func([]byte) error{
		"summary": func(b []byte) error { _, err := ParseSummary(b); return err },
		"info":    func(b []byte) error { _, err := ParseInfo(b); return err },
		"smlu":    func(b []byte) error { _, err := ParseSMLUInfo(b); return err },
	}
	for name, parse := range cases {
		if err := parse([]byte(msg + "\n")); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want the error to quote the line", name, err)
		}
		// A card index the tool does not have.
		if err := parse(read(t, dirX8, "info-c16-not-existed.txt")); err == nil || !strings.Contains(err.Error(), "Card 16 is not existed") {
			t.Errorf("%s: %v, want the not-existed line quoted", name, err)
		}
	}

	table := string(read(t, dirX8, "cnmon.txt"))
	for garbled, quoted := range map[string]string{
		strings.Replace(table, "| 3     /   MLU370-X8", "| x     /   MLU370-X8", 1):                       "x     /   MLU370-X8",
		strings.Replace(table, "0000:3D:00.0", "0000:3D:00", 1):                                           "0000:3D:00",
		strings.Replace(table, "|     0 MiB/ 23374 MiB | FULL", "|     0 MiB  23374 MiB | FULL", 1):       "0 MiB  23374 MiB",
		strings.Replace(table, "| Card  VF  Name       Firmware |", "| Card  Name  VF     Firmware |", 1): "Card  Name  VF",
		table + "trailing words\n": "trailing words",
	} {
		if _, err := ParseSummary([]byte(garbled)); err == nil || !strings.Contains(err.Error(), quoted) {
			t.Errorf("garbled table: %v, want %q quoted", err, quoted)
		}
	}
	// A card's second row missing.
	cut := strings.Replace(table, "|  0%   28C        105 W/ 250 W |     0 MiB/ 23374 MiB | FULL          Default |\n", "", 1)
	if _, err := ParseSummary([]byte(cut)); err == nil || !strings.Contains(err.Error(), "card 0 has no second row") {
		t.Errorf("missing row: %v", err)
	}

	info := string(read(t, dirX8, "info-c2.txt"))
	for garbled, quoted := range map[string]string{
		strings.Replace(info, "        Total                      : 23374 MiB", "        Total                      : lots", 1): "lots",
		strings.Replace(info, "        Bus num                    : 39", "        Bus num                    : 3g9", 1):         "3g9",
		strings.Replace(info, "    UUID  ", "      UUID", 1):                                                                    "UUID",
		strings.Replace(info, "    Product Name                   : MLU370-X8\n", "", 1):                                        "no Product Name",
	} {
		if _, err := ParseInfo([]byte(garbled)); err == nil || !strings.Contains(err.Error(), quoted) {
			t.Errorf("garbled info: %v, want %q quoted", err, quoted)
		}
	}

	two := string(read(t, dirX8, "smlu-info-c0-two.txt"))
	for garbled, quoted := range map[string]string{
		strings.Replace(two, "Instance Count                 : 2", "Instance Count                 : 3", 1):       "Instance Count is 3",
		strings.Replace(two, "MLU Quota                  : 50 %", "MLU Quota                  : half", 1):         "half",
		strings.Replace(two, "sMLU Mode                      : Enable", "sMLU Mode                      : On", 1): "sMLU Mode",
		strings.Replace(two, "        Device Node                : /dev/cambricon-caps/cap_dev0_mi2\n", "", 1):    "lacks its device node",
		two + "Card 1\n    sMLU Mode                      : Disable\n":                                            "2 Card sections",
	} {
		if _, err := ParseSMLUInfo([]byte(garbled)); err == nil || !strings.Contains(err.Error(), quoted) {
			t.Errorf("garbled smlu: %v, want %q quoted", err, quoted)
		}
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:3D:00.0": "0000:3d:00.0", " 0000:13:00.0 ": "0000:13:00.0", "N/A": "", "": "", "3D:00.0": "",
	} {
		if got := NormalizeBusID(in); got != want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPathsAndModels(t *testing.T) {
	for got, want := range map[string]string{
		DevicePath(3):              "/dev/cambricon_dev3",
		IPCMDevicePath(3):          "/dev/cambricon_ipcm3",
		CommuDevicePath(3):         "/dev/commu3",
		SMLUDevicePath(15, 2):      "/dev/cambricon-caps/cap_dev15_mi2",
		SMLUProfileName(50, 11687): "50p.11687mb",
		Family("MLU370-X8"):        "MLU370",
		Family("MLU590"):           "MLU590",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if cl, co := ModelCores("MLU370-X8"); cl != 4 || co != 16 {
		t.Errorf("MLU370-X8: %d clusters, %d cores", cl, co)
	}
	if cl, co := ModelCores("MLU999"); cl != 0 || co != 0 {
		t.Errorf("unknown model: %d, %d", cl, co)
	}
}
