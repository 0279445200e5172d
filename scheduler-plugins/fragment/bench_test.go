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
