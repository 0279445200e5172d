package topotree

import (
	"fmt"
	"testing"
)

// BenchmarkBuild measures building the tree from node labels, done once
// per gang plan: three tiers, spines of 16 blocks of 16 nodes.
func BenchmarkBuild(b *testing.B) {
	layers, err := Layers(seedLayers())
	if err != nil {
		b.Fatal(err)
	}
	for _, nodes := range []int{500, 5000} {
		var in []Node
		for i := 0; i < nodes; i++ {
			block := i / 16
			in = append(in, Node{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{
				"network.topology.nvidia.com/spine": fmt.Sprintf("spine-%d", block/16),
				"network.topology.nvidia.com/block": fmt.Sprintf("block-%d", block),
			}})
		}
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Build(layers, in)
			}
		})
	}
}
