package replay

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Two replays written apart merge into one folder with all their
// results, and what was written reads back as it was.
func TestMerge(t *testing.T) {
	curve := func(at float64) []float64 {
		c := make([]float64, 131)
		for b := range c {
			c[b] = math.NaN()
			if b >= 10 {
				c[b] = at * float64(b) / 100
			}
		}
		return c
	}
	a := []Result{{Variant: "default", Policy: "framework/strata", At100: []float64{4.27, 4.4}, Curve: curve(4.3), Elapsed: 90 * time.Second}}
	b := []Result{
		{Variant: "default", Policy: "framework/default", At100: []float64{7.5}, Curve: curve(7.5), Elapsed: 60 * time.Second},
		{Variant: "cpu050", Policy: "fgd", At100: []float64{5.1, 5.2, 5.0}, Curve: curve(5.1), Elapsed: time.Second},
	}
	dirA, dirB, out := t.TempDir(), t.TempDir(), t.TempDir()
	if err := writeResults(dirA, a); err != nil {
		t.Fatal(err)
	}
	if err := writeResults(dirB, b); err != nil {
		t.Fatal(err)
	}
	merged, err := Merge([]string{dirA, dirB}, out)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadResults(out)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]Result{}, a...), b...)
	approx := cmpopts.EquateApprox(0, 0.001)
	if diff := cmp.Diff(want, back, approx, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("merged results read back (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, merged, approx, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("merged results (-want +got):\n%s", diff)
	}
	for _, v := range []string{"default", "cpu050"} {
		if _, err := os.Stat(filepath.Join(out, "curve-"+v+".png")); err != nil {
			t.Error(err)
		}
	}
	if _, err := Merge([]string{dirA, dirA}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "framework/strata") {
		t.Errorf("merging a folder with itself: %v, want an error naming the policy found twice", err)
	}
}
