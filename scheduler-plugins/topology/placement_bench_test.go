package topology

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/strata-sh/strata/internal/topotree"
)

// benchTree builds spines × blocks × nodes with the seeds' label keys.
func benchTree(nodes, nodesPerBlock, blocksPerSpine int) *topotree.Tree {
	var in []topotree.Node
	for i := 0; i < nodes; i++ {
		block := i / nodesPerBlock
		in = append(in, topotree.Node{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{
			"network.topology.nvidia.com/spine": fmt.Sprintf("spine-%d", block/blocksPerSpine),
			"network.topology.nvidia.com/block": fmt.Sprintf("block-%d", block),
		}})
	}
	return topotree.Build(seedLayers(), in)
}

// BenchmarkPlace measures one gang decision on a half-full cluster of
// 8-GPU nodes, three tiers (spines of 16 blocks > blocks of 16 nodes >
// node): each member needs 4 GPUs, so a node has room for 0, 1 or 2
// members, 1 on average. Gangs of 8 gather in a block; larger ones (no
// block holds them) in a spine. Each case runs three ways: ref, the
// algorithm before the room aggregates (the test's reference); map,
// Place with the capacities as a map, summed up the tree per decision
// (what the gang plugin calls); room, Room.Place on aggregates kept
// across decisions.
func BenchmarkPlace(b *testing.B) {
	for _, nodes := range []int{500, 5000} {
		tree := benchTree(nodes, 16, 16)
		rng := rand.New(rand.NewPCG(1, uint64(nodes)))
		capacity := make(map[string]int, nodes)
		for n := range tree.Leaf {
			capacity[n] = rng.IntN(3)
		}
		room := NewRoom(tree, capacity)
		for _, pods := range []int{8, 64, 200} {
			for _, strategy := range []topotree.Strategy{topotree.PreferGather, topotree.MustGather} {
				layer := "BlockLayer"
				if pods > 8 {
					layer = "SpineLayer" // no block of 16 half-full nodes holds them
				}
				req := Request{Pods: pods, Capacity: capacity, Rules: []topotree.Rule{{Layer: layer, Strategy: strategy}}}
				for _, way := range []struct {
					name  string
					place func() (*Plan, error)
				}{
					{"ref", func() (*Plan, error) { return refPlace(tree, req) }},
					{"map", func() (*Plan, error) { return Place(tree, req) }},
					{"room", func() (*Plan, error) { return room.Place(req) }},
				} {
					b.Run(fmt.Sprintf("nodes=%d/pods=%d/%s=%s/%s", nodes, pods, layer, strategy, way.name), func(b *testing.B) {
						b.ReportAllocs()
						var plan *Plan
						for b.Loop() {
							var err error
							if plan, err = way.place(); err != nil {
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
}

// BenchmarkRoomSet measures keeping the room up to date: one node's
// room changed, as when a member is placed or a pod leaves.
func BenchmarkRoomSet(b *testing.B) {
	tree := benchTree(5000, 16, 16)
	room := NewRoom(tree, uniform(tree, 1))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		room.Set(fmt.Sprintf("node-%05d", i%5000), i%3)
		i++
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
	for _, strategy := range []topotree.Strategy{topotree.PreferGather, topotree.MustGather} {
		req := Request{Pods: 16, Capacity: capacity, Rules: []topotree.Rule{{Layer: "SpineLayer", Strategy: strategy}}}
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

// blocksSpanned counts the blocks a plan uses.
func blocksSpanned(tree *topotree.Tree, plan *Plan) int {
	seen := map[*topotree.Domain]bool{}
	for n, c := range plan.Nodes {
		if c > 0 {
			seen[tree.Leaf[n]] = true
		}
	}
	return len(seen)
}

// fewestBlocks is the fewest blocks of one spine that hold pods: per
// spine, the roomiest blocks first.
func fewestBlocks(tree *topotree.Tree, capacity map[string]int, pods int) int {
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
