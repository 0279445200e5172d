package topotree

import (
	"fmt"
	"testing"
)

// FuzzBuild builds a tree of two layers (a spine named by either of two
// label keys, a block by one) over nodes whose labels the input picks,
// and holds the tree to what the scheduler and the controller rely on:
// every node is placed exactly once or unplaced with a reason; a placed
// node's domains are those its labels name; every domain has one parent
// one layer up and is among its children; the node counts add up; All
// lists every domain once, layer by layer, at its Index.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{1, 0, 1, 1, 0, 1, 2, 0, 2})
	f.Add([]byte{1, 2, 1, 0, 0, 0, 3, 3, 4})
	f.Add([]byte{1, 1, 1, 2, 2, 1}) // a block under two spines
	f.Fuzz(func(t *testing.T, data []byte) {
		layers := []Layer{
			{Name: "SpineLayer", LabelKeys: []string{"spine", "spine-alt"}},
			{Name: "BlockLayer", LabelKeys: []string{"block"}},
		}
		var nodes []Node
		for i := 0; i+2 < len(data) && len(nodes) < 64; i += 3 {
			labels := map[string]string{}
			if v := data[i] % 4; v != 0 {
				labels["spine"] = fmt.Sprint("s", v)
			}
			if v := data[i+1] % 4; v != 0 {
				labels["spine-alt"] = fmt.Sprint("s", v)
			}
			if v := data[i+2] % 5; v != 0 {
				labels["block"] = fmt.Sprint("b", v)
			}
			nodes = append(nodes, Node{Name: fmt.Sprint("n", len(nodes)), Labels: labels})
		}
		tree := Build(layers, nodes)

		unplaced := map[string]string{}
		for _, u := range tree.Unplaced {
			if _, twice := unplaced[u.Node]; twice {
				t.Fatalf("node %s unplaced twice", u.Node)
			}
			if u.Reason == "" {
				t.Fatalf("node %s unplaced without a reason", u.Node)
			}
			unplaced[u.Node] = u.Reason
		}
		for _, n := range nodes {
			leaf, placed := tree.Leaf[n.Name]
			_, left := unplaced[n.Name]
			if placed == left {
				t.Fatalf("node %s placed %v and unplaced %v", n.Name, placed, left)
			}
			if !placed {
				continue
			}
			spine := n.Labels["spine"]
			if spine == "" {
				spine = n.Labels["spine-alt"]
			}
			if leaf.Name != n.Labels["block"] || leaf.Layer != 1 || tree.Ancestor(n.Name, 0) == nil || tree.Ancestor(n.Name, 0).Name != spine {
				t.Fatalf("node %s (labels %v) placed under %s/%v", n.Name, n.Labels, leaf.Name, tree.Ancestor(n.Name, 0))
			}
		}
		total := 0
		for _, r := range tree.Roots {
			if r.Parent != nil || r.Layer != 0 {
				t.Fatalf("root %s has parent %v, layer %d", r.Name, r.Parent, r.Layer)
			}
			total += r.NodeCount()
		}
		if total != len(tree.Leaf) {
			t.Fatalf("roots count %d nodes, %d placed", total, len(tree.Leaf))
		}
		count := 0
		for i, d := range tree.All {
			if d.Index != i || tree.Domains[d.Layer][d.Name] != d || (i > 0 && tree.All[i-1].Layer > d.Layer) {
				t.Fatalf("All[%d] is %s of layer %d with index %d", i, d.Name, d.Layer, d.Index)
			}
		}
		for i, m := range tree.Domains {
			count += len(m)
			for name, d := range m {
				if d.Name != name || d.Layer != i {
					t.Fatalf("domain %s filed as %s in layer %d", d.Name, name, i)
				}
				if i == 0 {
					continue
				}
				found := false
				for _, c := range d.Parent.Children {
					found = found || c == d
				}
				if d.Parent.Layer != i-1 || !found {
					t.Fatalf("domain %s: parent %s in layer %d, among its children %v", d.Name, d.Parent.Name, d.Parent.Layer, found)
				}
			}
		}
		if count != len(tree.All) {
			t.Fatalf("All lists %d domains, the layers %d", len(tree.All), count)
		}
	})
}
