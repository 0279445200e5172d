package replay

import (
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlot draws the curves of one variant's results, one line per policy
// in the order of rs, into a PNG at path. Results of other variants are
// left out, and so are the points without data.
func writePlot(path, variant string, rs []Result) error {
	p := plot.New()
	p.Title.Text = "openb " + variant + ": unallocated GPUs against arrived demand"
	p.X.Label.Text = "arrived GPU demand (% of cluster GPUs)"
	p.Y.Label.Text = "unallocated GPUs (% of cluster)"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	i := 0
	for _, r := range rs {
		if r.Variant != variant {
			continue
		}
		var xys plotter.XYs
		for b, v := range r.Curve {
			if !math.IsNaN(v) {
				xys = append(xys, plotter.XY{X: float64(b), Y: v})
			}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.Policy, l)
		i++
	}
	// The axes start at zero and span the whole arrived range; the dashed
	// line marks 100 % arrived, where results.csv takes its numbers.
	p.X.Min, p.X.Max = 0, 130
	p.Y.Min = 0
	if !(p.Y.Max > 0) {
		p.Y.Max = 1
	}
	at100, err := plotter.NewLine(plotter.XYs{{X: 100, Y: p.Y.Min}, {X: 100, Y: p.Y.Max}})
	if err != nil {
		return err
	}
	at100.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	at100.Color = plotter.DefaultLineStyle.Color
	p.Add(at100)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
