package replay

import (
	"math"
	"math/rand/v2"
)

// Inflation is how much GPU demand the protocol draws, as a share of the
// cluster's GPUs.
const Inflation = 1.3

// Sample draws pods uniformly with replacement from the list until their
// GPU demand reaches Inflation times the cluster's GPUs, in the seeded
// order they are drawn (drawing with replacement is the shuffle).
func Sample(pods []TracePod, clusterGPUMilli int64, seed uint64) []TracePod {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	target := int64(math.Round(Inflation * float64(clusterGPUMilli)))
	var out []TracePod
	var demand int64
	for demand < target {
		p := pods[rng.IntN(len(pods))]
		out = append(out, p)
		demand += p.GPUMilli()
	}
	return out
}

// Curve records allocated GPU against arrived GPU demand, both in percent
// of the cluster's GPUs.
type Curve struct {
	total          int64
	arrived, alloc int64
	sums           []float64
	counts         []int
	// At100 is the unallocated GPU percent when arrivals first reach
	// 100 %; NaN until then.
	At100 float64
}

// NewCurve starts a curve for a cluster of totalMilli milli-GPU.
func NewCurve(totalMilli int64) *Curve {
	return &Curve{total: totalMilli, sums: make([]float64, 131), counts: make([]int, 131), At100: math.NaN()}
}

// Add records one arrived pod and whether it was placed.
func (c *Curve) Add(p TracePod, placed bool) {
	c.arrived += p.GPUMilli()
	if placed {
		c.alloc += p.GPUMilli()
	}
	arrived := 100 * float64(c.arrived) / float64(c.total)
	alloc := 100 * float64(c.alloc) / float64(c.total)
	if b := int(math.Round(arrived)); b >= 0 && b < len(c.sums) {
		c.sums[b] += alloc
		c.counts[b]++
	}
	if math.IsNaN(c.At100) && c.arrived >= c.total {
		c.At100 = 100 - alloc
	}
}

// Unallocated returns, for each whole arrived percent 0-130, the mean
// unallocated GPU percent of the arrivals that rounded to it (NaN where
// none did), as the trace authors' analysis bins it.
func (c *Curve) Unallocated() []float64 {
	out := make([]float64, len(c.sums))
	for i := range out {
		out[i] = math.NaN()
		if c.counts[i] > 0 {
			out[i] = 100 - c.sums[i]/float64(c.counts[i])
		}
	}
	return out
}
