package cnmon

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// addCaptures seeds f with every recorded cnmon output of testdata: the
// verbatim captures of real machines and the recorded session.
func addCaptures(f *testing.F) {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.txt"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no cnmon captures under testdata: %v", err)
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
// as it reads the original.
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

// FuzzParseSummary: a card table that parses lists each card once, with
// a kernel bus id where the layout has a Bus-Id column and sizes no
// negative.
func FuzzParseSummary(f *testing.F) {
	addCaptures(f)
	f.Fuzz(func(t *testing.T, out []byte) {
		s, err := ParseSummary(out)
		if err != nil {
			return
		}
		if s.Version == "" {
			t.Error("table parsed without a CNMON version")
		}
		seen := map[int]bool{}
		for _, c := range s.Cards {
			if c.Index < 0 || c.MemoryUsedMB < 0 || c.MemoryTotalMB < 0 || c.Name == "" {
				t.Errorf("card %+v", c)
			}
			if c.BusID != "" && !busIDRe.MatchString(c.BusID) {
				t.Errorf("card %d: bus id %q is not in the kernel's form", c.Index, c.BusID)
			}
			if seen[c.Index] {
				t.Errorf("card %d listed twice", c.Index)
			}
			seen[c.Index] = true
		}
		sameOnCRLF(t, "table", out, ParseSummary)
	})
}

// FuzzParseListings: cnmon info and the sMLU listing ("Card N" sections
// of nested "key : value" lines) either fail or give each card and
// instance once, quotas that are percentages and sizes that are sizes.
func FuzzParseListings(f *testing.F) {
	addCaptures(f)
	f.Fuzz(func(t *testing.T, out []byte) {
		if infos, err := ParseInfo(out); err == nil {
			seen := map[int]bool{}
			for _, in := range infos {
				if in.Card < 0 || in.ProductName == "" || in.MemoryTotalMB < 0 || in.MemoryUsedMB < 0 {
					t.Errorf("info: card %+v", in)
				}
				if in.BusID != "" && !busIDRe.MatchString(in.BusID) {
					t.Errorf("info: card %d bus id %q is not in the kernel's form", in.Card, in.BusID)
				}
				if seen[in.Card] {
					t.Errorf("info: Card %d listed twice", in.Card)
				}
				seen[in.Card] = true
			}
		}
		if info, err := ParseSMLUInfo(out); err == nil {
			if info.Card < 0 {
				t.Errorf("smlu: card %d", info.Card)
			}
			ids := map[int]bool{}
			for _, s := range info.Instances {
				if s.Card != info.Card || s.ID < 0 || s.ProfileID < 0 || s.DeviceNode == "" ||
					s.VCorePercent < 1 || s.VCorePercent > 100 || s.MemoryMB <= 0 {
					t.Errorf("smlu: instance %+v", s)
				}
				if ids[s.ID] {
					t.Errorf("smlu: instance %d listed twice", s.ID)
				}
				ids[s.ID] = true
			}
		}
		sameOnCRLF(t, "info", out, ParseInfo)
		sameOnCRLF(t, "smlu", out, ParseSMLUInfo)
	})
}

// printedIDs are the instance and card numbers of a command's success
// line, as printed less leading zeros.
func printedIDs(re *regexp.Regexp, out []byte) (id, card string) {
	m := re.FindSubmatch(out)
	if m == nil {
		return "", ""
	}
	trim := func(b []byte) string {
		if s := strings.TrimLeft(string(b), "0"); s != "" {
			return s
		}
		return "0"
	}
	return trim(m[1]), trim(m[2])
}

// FuzzParseSMLUCommands: a create or destroy is reported done only when
// cnmon said so, and the card and instance returned are the ones it
// printed.
func FuzzParseSMLUCommands(f *testing.F) {
	addCaptures(f)
	f.Add([]byte("Create sMLU instance 12 on card 3 success\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		if card, id, err := ParseCreateSMLU(out); err == nil {
			if wantID, wantCard := printedIDs(createdRe, out); strconv.Itoa(id) != wantID || strconv.Itoa(card) != wantCard {
				t.Errorf("create: card %d instance %d from %q", card, id, out)
			}
		}
		if card, id, err := ParseDestroySMLU(out); err == nil {
			if wantID, wantCard := printedIDs(destroyedRe, out); strconv.Itoa(id) != wantID || strconv.Itoa(card) != wantCard {
				t.Errorf("destroy: card %d instance %d from %q", card, id, out)
			}
		}
	})
}
