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

// Until returns the prefix of a sample whose arrivals reach percent of
// the cluster's GPUs (the pod that reaches it included); percent at or
// above Inflation's keeps the whole sample. Placements of the prefix are
// those of the whole sample, since pods arrive in order: stopping at 100
// leaves the figure at 100 % arrived as it is and drops the curve beyond.
func Until(sample []TracePod, clusterGPUMilli int64, percent int) []TracePod {
	if float64(percent) >= 100*Inflation {
		return sample
	}
	target := clusterGPUMilli * int64(percent) / 100
	var arrived int64
	for i, p := range sample {
		if arrived += p.GPUMilli(); arrived >= target {
			return sample[:i+1]
		}
	}
	return sample
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
