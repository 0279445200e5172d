package topology

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// benchTree builds spines × blocks × nodes with the seeds' label keys.
func benchTree(b *testing.B, nodes, nodesPerBlock, blocksPerSpine int) (*Tree, []Node) {
	layers, err := Layers(seedLayers())
	if err != nil {
		b.Fatal(err)
	}
	var in []Node
	for i := 0; i < nodes; i++ {
		block := i / nodesPerBlock
		in = append(in, Node{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{
			"network.topology.nvidia.com/spine": fmt.Sprintf("spine-%d", block/blocksPerSpine),
			"network.topology.nvidia.com/block": fmt.Sprintf("block-%d", block),
		}})
	}
	return Build(layers, in), in
}

// BenchmarkPlace measures one gang decision on a half-full cluster of
// 8-GPU nodes (3 layers: spines of 32 blocks > blocks of 32 nodes > node):
// each member needs 4 GPUs, so a node has room for 0, 1 or 2 members, 1
// on average. Gangs of 8 gather in a block; larger ones (no block holds
// them) in a spine.
func BenchmarkPlace(b *testing.B) {
	for _, nodes := range []int{1024, 4096} {
		tree, in := benchTree(b, nodes, 32, 32)
		rng := rand.New(rand.NewPCG(1, uint64(nodes)))
		capacity := make(map[string]int, nodes)
		for _, n := range in {
			capacity[n.Name] = rng.IntN(3)
		}
		for _, pods := range []int{8, 64, 512} {
			for _, strategy := range []Strategy{PreferGather, MustGather} {
				layer := "BlockLayer"
				if pods > 16 {
					layer = "SpineLayer" // no block of 32 half-full nodes holds them
				}
				req := Request{Pods: pods, Capacity: capacity, Rules: []Rule{{Layer: layer, Strategy: strategy}}}
				b.Run(fmt.Sprintf("nodes=%d/pods=%d/%s=%s", nodes, pods, layer, strategy), func(b *testing.B) {
					b.ReportAllocs()
					var plan *Plan
					for b.Loop() {
						var err error
						if plan, err = Place(tree, req); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(blocksSpanned(tree, plan)), "blocks")
					b.ReportMetric(float64(fewestBlocks(tree, capacity, pods)), "min-blocks")
				})
			}
		}
	}
}

// BenchmarkPlaceUneven is the fragmented case: spine s0 of ten 2-node
// blocks, s1 of four 8-node blocks, one pod per node, a 16-pod gang.
func BenchmarkPlaceUneven(b *testing.B) {
	tree := unevenSpines(b)
	capacity := map[string]int{}
	for n := range tree.Leaf {
		capacity[n] = 1
	}
	for _, strategy := range []Strategy{PreferGather, MustGather} {
		req := Request{Pods: 16, Capacity: capacity, Rules: []Rule{{Layer: "SpineLayer", Strategy: strategy}}}
		b.Run("SpineLayer="+string(strategy), func(b *testing.B) {
			var plan *Plan
			for b.Loop() {
				var err error
				if plan, err = Place(tree, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(blocksSpanned(tree, plan)), "blocks")
			b.ReportMetric(float64(fewestBlocks(tree, capacity, 16)), "min-blocks")
		})
	}
}

// BenchmarkBuild measures building the tree from node labels, done once
// per scheduling cycle of a gang's first member.
func BenchmarkBuild(b *testing.B) {
	for _, nodes := range []int{1024, 4096} {
		_, in := benchTree(b, nodes, 32, 32)
		layers, _ := Layers(seedLayers())
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Build(layers, in)
			}
		})
	}
}

// blocksSpanned counts the blocks a plan uses.
func blocksSpanned(tree *Tree, plan *Plan) int {
	seen := map[*Domain]bool{}
	for n, c := range plan.Nodes {
		if c > 0 {
			seen[tree.Leaf[n]] = true
		}
	}
	return len(seen)
}

// fewestBlocks is the fewest blocks of one spine that hold pods: per
// spine, the roomiest blocks first.
func fewestBlocks(tree *Tree, capacity map[string]int, pods int) int {
	best := -1
	for _, spine := range tree.Roots {
		var caps []int
		for _, block := range spine.Children {
			c := 0
			for _, n := range block.Nodes {
				c += capacity[n]
			}
			caps = append(caps, c)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(caps)))
		left, n := pods, 0
		for _, c := range caps {
			if left <= 0 {
				break
			}
			left -= c
			n++
		}
		if left <= 0 && (best < 0 || n < best) {
			best = n
		}
	}
	return best
}
