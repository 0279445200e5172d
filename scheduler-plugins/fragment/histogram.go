package fragment

import "math"

// Histogram learns a workload from the tasks a scheduler sees, the recent
// ones weighing more: each observation multiplies the weight of what came
// before by 2^(-1/HalfLife).
type Histogram struct {
	// HalfLife is in observations; 0 keeps every observation's weight.
	HalfLife float64
	shapes   []Shape
	// scale grows instead of every weight shrinking; weights are divided
	// by it when read.
	scale float64
}

// Observe counts one task.
func (h *Histogram) Observe(t Task) {
	if h.scale == 0 {
		h.scale = 1
	}
	if h.HalfLife > 0 {
		h.scale *= math.Exp2(1 / h.HalfLife)
		if h.scale > 1e100 {
			for i := range h.shapes {
				h.shapes[i].Weight /= h.scale
			}
			h.scale = 1
		}
	}
	for i := range h.shapes {
		if sameTask(h.shapes[i].Task, t) {
			h.shapes[i].Weight += h.scale
			return
		}
	}
	h.shapes = append(h.shapes, Shape{Task: t, Weight: h.scale})
}

// Len is the number of distinct shapes seen.
func (h *Histogram) Len() int { return len(h.shapes) }

// Workload is the learnt mix.
func (h *Histogram) Workload(o Options) *Workload {
	out := make([]Shape, len(h.shapes))
	for i, s := range h.shapes {
		out[i] = Shape{Task: s.Task, Weight: s.Weight / h.scale}
	}
	return NewWorkload(out, o)
}
