package fragment

import (
	"fmt"
	"testing"
)

// BenchmarkScoreCluster is one pod's scoring over a cluster of 8-GPU
// nodes in various states, against a workload of 35 shapes (the openb
// default trace's 95 % coverage): FirstFit and Delta per node.
func BenchmarkScoreCluster(b *testing.B) {
	var shapes []Shape
	for i := 0; i < 35; i++ {
		switch i % 3 {
		case 0:
			shapes = append(shapes, Shape{Task{CPU: int64(2000 + 1000*i), Memory: gi, GPUs: 1, Milli: Whole}, float64(40 - i)})
		case 1:
			shapes = append(shapes, Shape{Task{CPU: int64(1000 * i), Memory: gi, GPUs: 1, Milli: int32(100 + 20*i)}, float64(40 - i)})
		default:
			shapes = append(shapes, Shape{Task{CPU: int64(500 * i), Memory: gi}, float64(40 - i)})
		}
	}
	w := NewWorkload(shapes, DefaultOptions)
	for _, size := range []int{100, 1000, 5000} {
		nodes := make([]*Node, size)
		for i := range nodes {
			g := make([]int32, 8)
			for j := range g {
				g[j] = int32((i*7 + j*130) % 1001)
			}
			nodes[i] = &Node{CPU: int64(96000 - 500*(i%100)), Memory: 384 * gi, GPUs: g}
		}
		pod := Task{CPU: 6000, Memory: gi, GPUs: 1, Milli: 460}
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			for b.Loop() {
				for _, n := range nodes {
					if g, ok := FirstFit(n, pod); ok {
						w.Delta(n, pod, g)
					}
				}
			}
		})
	}
}

// BenchmarkScoreClusterMIG is one MIG pod's scoring over a cluster of
// 8-GPU A100 nodes, some GPUs partitioned, some whole, some shared,
// against a mix of whole GPUs, shares and every A100 profile.
func BenchmarkScoreClusterMIG(b *testing.B) {
	var shapes []Shape
	profiles := []struct {
		name  string
		milli int32
	}{{"1g.5gb", 125}, {"2g.10gb", 250}, {"3g.20gb", 500}, {"4g.20gb", 500}, {"7g.40gb", Whole}}
	for i, p := range profiles {
		shapes = append(shapes,
			Shape{Task{CPU: int64(2000 * (i + 1)), Memory: gi, GPUs: 1, Milli: p.milli, Profile: p.name}, float64(10 - i)},
			Shape{Task{CPU: int64(3000 * (i + 1)), Memory: gi, GPUs: 1, Milli: Whole}, float64(5 + i)},
			Shape{Task{CPU: int64(1000 * (i + 1)), Memory: gi, GPUs: 1, Milli: int32(200 + 100*i)}, float64(8 - i)})
	}
	w := NewWorkload(shapes, DefaultOptions)
	masks := []uint32{0, 0x01, 0x0f, 0x3f, 0x7f, 0xf0}
	for _, size := range []int{100, 1000, 5000} {
		nodes := make([]*Node, size)
		for i := range nodes {
			g, used := make([]int32, 8), make([]uint32, 8)
			for j := range g {
				switch k := (i*3 + j) % 9; {
				case k < len(masks):
					used[j] = masks[k]
					if used[j] == 0 {
						g[j] = Whole
					}
				case k == 6:
					g[j] = 400
				}
			}
			nodes[i] = &Node{CPU: int64(96000 - 500*(i%100)), Memory: 384 * gi, Model: "A100", GPUs: g, MIG: a100, Slices: used}
		}
		pod := Task{CPU: 4000, Memory: gi, GPUs: 1, Milli: 250, Profile: "2g.10gb"}
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			for b.Loop() {
				for _, n := range nodes {
					if f, ok := FirstFit(n, pod); ok {
						w.Delta(n, pod, f)
					}
				}
			}
		})
	}
}
