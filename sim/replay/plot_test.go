package replay

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestWritePlot draws two fake policies' curves and checks that a PNG of a
// readable size comes out.
func TestWritePlot(t *testing.T) {
	curve := func(slope float64) []float64 {
		c := make([]float64, 131)
		for b := range c {
			c[b] = max(0, 100-slope*float64(b))
		}
		c[0], c[130] = math.NaN(), math.NaN()
		return c
	}
	rs := []Result{
		{Variant: "default", Policy: "best-fit", Curve: curve(0.9)},
		{Variant: "default", Policy: "first-fit", Curve: curve(0.8)},
		{Variant: "other", Policy: "best-fit", Curve: curve(0.5)},
	}
	path := filepath.Join(t.TempDir(), "curve-default.png")
	if err := writePlot(path, "default", rs); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 300 {
		t.Errorf("plot is %dx%d, want at least 600x300", b.Dx(), b.Dy())
	}
}
