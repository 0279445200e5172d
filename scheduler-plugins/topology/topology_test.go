package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/strata-sh/strata/internal/topotree"
)

// seedLayers is the seeds' network above the nodes: spine > block, with
// the old and the new NVIDIA block label keys.
func seedLayers() []topotree.Layer {
	return []topotree.Layer{
		{Name: "SpineLayer", LabelKeys: []string{"network.topology.nvidia.com/spine"}},
		{Name: "BlockLayer", LabelKeys: []string{"network.topology.nvidia.com/block", "network.topology.nvidia.com/accelerator"}},
	}
}

// cluster builds spines × blocks × nodes; capacity gives each node's room.
func cluster(t *testing.T, spines, blocksPerSpine, nodesPerBlock int) *topotree.Tree {
	t.Helper()
	layers := seedLayers()
	var nodes []topotree.Node
	for s := 0; s < spines; s++ {
		for b := 0; b < blocksPerSpine; b++ {
			block := fmt.Sprintf("b%d", s*blocksPerSpine+b)
			for n := 0; n < nodesPerBlock; n++ {
				nodes = append(nodes, topotree.Node{Name: fmt.Sprintf("%s-n%d", block, n), Labels: map[string]string{
					"network.topology.nvidia.com/spine": fmt.Sprintf("s%d", s),
					"network.topology.nvidia.com/block": block,
				}})
			}
		}
	}
	return topotree.Build(layers, nodes)
}

func uniform(tree *topotree.Tree, c int) map[string]int {
	out := map[string]int{}
	for n := range tree.Leaf {
		out[n] = c
	}
	return out
}

func blocksOf(plan *Plan) []string {
	seen := map[string]bool{}
	var out []string
	for n := range plan.Nodes {
		b := strings.SplitN(n, "-", 2)[0]
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

func total(plan *Plan) int {
	s := 0
	for _, v := range plan.Nodes {
		s += v
	}
	return s
}

func TestPlacePrefersOneBlockAndSpreadsOnlyWhenNoneFits(t *testing.T) {
	tree := cluster(t, 2, 2, 4) // 4 blocks of 4 nodes
	capacity := uniform(tree, 1)
	// b0 has room for 2, b1 for 3, b2 for 4, b3 for 4.
	capacity["b0-n0"], capacity["b0-n1"] = 0, 0
	capacity["b1-n0"] = 0
	rules := []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.PreferGather}}

	plan, err := Place(tree, Request{Pods: 3, Capacity: capacity, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Domain != "b1" || total(plan) != 3 {
		t.Errorf("3 pods went to %s %v, want the tightest block b1", plan.Domain, plan.Nodes)
	}
	plan, err = Place(tree, Request{Pods: 6, Capacity: capacity, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	if total(plan) != 6 || len(blocksOf(plan)) != 2 {
		t.Errorf("6 pods over blocks %v, want two blocks (no block holds 6)", blocksOf(plan))
	}
}

func TestPlaceMustGatherFailsWithTheClosestDomain(t *testing.T) {
	tree := cluster(t, 1, 3, 4)
	capacity := uniform(tree, 2) // 8 per block
	capacity["b2-n0"], capacity["b2-n1"] = 4, 4
	_, err := Place(tree, Request{Pods: 13, Capacity: capacity, Rules: []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.MustGather}}})
	f, ok := err.(*Failure)
	if !ok {
		t.Fatalf("error = %v, want a Failure", err)
	}
	if f.Layer != "BlockLayer" || f.Domain != "b2" || f.Fit != 12 || f.Need != 13 {
		t.Errorf("failure = %+v, want b2 with room for 12 of 13", f)
	}
	if want := "13 pods do not fit in any BlockLayer domain; closest b2: 12 of 13 pods fit"; f.Error() != want {
		t.Errorf("message %q, want %q", f.Error(), want)
	}
	plan, err := Place(tree, Request{Pods: 12, Capacity: capacity, Rules: []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.MustGather}}})
	if err != nil || plan.Domain != "b2" {
		t.Errorf("12 pods: plan %+v, err %v, want block b2", plan, err)
	}
}

func TestPlacePodCountMultiple(t *testing.T) {
	tree := cluster(t, 1, 2, 2)
	capacity := map[string]int{"b0-n0": 8, "b0-n1": 3, "b1-n0": 8, "b1-n1": 8}
	rules := []topotree.Rule{{Layer: "NodeTopologyLayer", Strategy: topotree.PreferGather, PodCountMultiple: 4}}
	plan, err := Place(tree, Request{Pods: 20, Capacity: capacity, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	for n, c := range plan.Nodes {
		if c%4 != 0 {
			t.Errorf("node %s got %d pods, not a multiple of 4", n, c)
		}
	}
	if total(plan) != 20 {
		t.Errorf("placed %d of 20", total(plan))
	}
}

func TestPlacedMembersPullAndBindMustGather(t *testing.T) {
	tree := cluster(t, 1, 3, 4)
	capacity := uniform(tree, 2)
	placed := map[string]int{"b2-n3": 2}
	plan, err := Place(tree, Request{Pods: 4, Capacity: capacity, Placed: placed, Rules: []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.PreferGather}}})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Domain != "b2" {
		t.Errorf("new members went to %s, want b2 where the gang runs", plan.Domain)
	}
	// Must-gather: the block of the placed members is the only choice.
	capacity["b2-n0"], capacity["b2-n1"], capacity["b2-n2"] = 0, 0, 0
	capacity["b2-n3"] = 1
	if _, err := Place(tree, Request{Pods: 4, Capacity: capacity, Placed: placed, Rules: []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.MustGather}}}); err == nil {
		t.Errorf("must-gather gang left its block")
	}
}

func TestPlaceRejectsUnknownLayer(t *testing.T) {
	tree := cluster(t, 1, 1, 1)
	_, err := Place(tree, Request{Pods: 1, Capacity: uniform(tree, 1), Rules: []topotree.Rule{{Layer: "RackLayer", Strategy: topotree.MustGather}}})
	if err == nil || !strings.Contains(err.Error(), `layer "RackLayer" is not a layer`) {
		t.Errorf("error = %v", err)
	}
}

// TestPlaceNeverOverfills checks on many random clusters that a plan never
// puts more pods on a node than it has room for, places exactly the gang,
// and honours MustGather.
func TestPlaceNeverOverfills(t *testing.T) {
	for seed := 0; seed < 200; seed++ {
		tree := cluster(t, 2, 3, 5)
		capacity := map[string]int{}
		i := seed
		for n := range tree.Leaf {
			i = (i*1103515245 + 12345) & 0x7fffffff
			capacity[n] = i % 5
		}
		pods := 1 + seed%40
		plan, err := Place(tree, Request{Pods: pods, Capacity: capacity, Rules: []topotree.Rule{{Layer: "SpineLayer", Strategy: topotree.MustGather}, {Layer: "BlockLayer", Strategy: topotree.PreferGather}}})
		if err != nil {
			continue
		}
		spines := map[string]bool{}
		for n, c := range plan.Nodes {
			if c > capacity[n] {
				t.Fatalf("seed %d: node %s got %d, room %d", seed, n, c, capacity[n])
			}
			spines[tree.Ancestor(n, 0).Name] = true
		}
		if total(plan) != pods || len(spines) != 1 {
			t.Fatalf("seed %d: placed %d of %d over spines %v", seed, total(plan), pods, spines)
		}
	}
}

// unevenSpines is the fragmented cluster of the topology issue: spine s0
// with ten blocks of two nodes, spine s1 with four blocks of eight.
func unevenSpines(t testing.TB) *topotree.Tree {
	t.Helper()
	layers := seedLayers()
	var nodes []topotree.Node
	add := func(spine string, blocks, perBlock, first int) {
		for b := 0; b < blocks; b++ {
			block := fmt.Sprintf("b%d", first+b)
			for n := 0; n < perBlock; n++ {
				nodes = append(nodes, topotree.Node{Name: fmt.Sprintf("%s-n%d", block, n), Labels: map[string]string{
					"network.topology.nvidia.com/spine": spine, "network.topology.nvidia.com/block": block,
				}})
			}
		}
	}
	add("s0", 10, 2, 0)
	add("s1", 4, 8, 10)
	return topotree.Build(layers, nodes)
}

// TestPlaceSpansFewestSwitches: a 16-pod gang (one pod per node) fits in
// both spines; s0 has less spare room but would take 8 blocks, s1 takes
// 2. Fewest blocks wins, whether the spine is required or preferred.
func TestPlaceSpansFewestSwitches(t *testing.T) {
	tree := unevenSpines(t)
	for _, strategy := range []topotree.Strategy{topotree.MustGather, topotree.PreferGather} {
		plan, err := Place(tree, Request{Pods: 16, Capacity: uniform(tree, 1), Rules: []topotree.Rule{{Layer: "SpineLayer", Strategy: strategy}}})
		if err != nil {
			t.Fatalf("%s: %v", strategy, err)
		}
		if plan.Domain != "s1" || len(blocksOf(plan)) != 2 {
			t.Errorf("%s: placed in %s over blocks %v, want s1 over 2 blocks", strategy, plan.Domain, blocksOf(plan))
		}
	}
	// Two pods fit in one block of either spine: the block they fill
	// exactly wins over the roomier ones.
	plan, err := Place(tree, Request{Pods: 2, Capacity: uniform(tree, 1), Rules: []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.MustGather}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := blocksOf(plan); len(got) != 1 || got[0] != "b0" {
		t.Errorf("2-pod gang in blocks %v, want the exactly fitting b0", got)
	}
}
