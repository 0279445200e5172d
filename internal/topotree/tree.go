// Package topotree builds the tree of network domains (spine > block >
// node) from node labels and the layers of a ClusterNetworkTopology, and
// names what a gang may ask of it (Rule). The scheduler's placement, the
// controller's ClusterNetworkTopology status, the admission webhook and
// the gang-annotation parser all use it, so it imports no scheduler
// plugin and knows nothing of the scheduler framework.
package topotree

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
)

// Layer is one layer above the nodes, with the label keys that place a
// node in it, in order of preference.
type Layer struct {
	Name      string
	LabelKeys []string
}

// Layers turns a ClusterNetworkTopology spec into the chain of layers from
// the top down, without the node layer. Errors name the field.
func Layers(spec topologyv1alpha1.ClusterNetworkTopologySpec) ([]Layer, error) {
	p := field.NewPath("spec", "networkTopologySpec")
	var errs field.ErrorList
	byParent := map[string]int{}
	names := map[string]int{}
	root := -1
	for i, l := range spec.NetworkTopologySpec {
		lp := p.Index(i)
		if l.TopologyLayer == "" {
			errs = append(errs, field.Required(lp.Child("topologyLayer"), ""))
			continue
		}
		if _, dup := names[l.TopologyLayer]; dup {
			errs = append(errs, field.Duplicate(lp.Child("topologyLayer"), l.TopologyLayer))
		}
		names[l.TopologyLayer] = i
		if l.ParentTopologyLayer == "" {
			if root >= 0 {
				errs = append(errs, field.Invalid(lp.Child("parentTopologyLayer"), "", "only one layer may have no parent"))
			}
			root = i
		} else {
			if other, dup := byParent[l.ParentTopologyLayer]; dup {
				errs = append(errs, field.Invalid(lp.Child("parentTopologyLayer"), l.ParentTopologyLayer,
					fmt.Sprintf("layer %s already has %s as parent; layers must form one chain", spec.NetworkTopologySpec[other].TopologyLayer, l.ParentTopologyLayer)))
			}
			byParent[l.ParentTopologyLayer] = i
		}
		if l.TopologyLayer != topologyv1alpha1.NodeTopologyLayer && len(l.LabelKey) == 0 {
			errs = append(errs, field.Required(lp.Child("labelKey"), "every layer above the nodes needs a label key"))
		}
	}
	for i, l := range spec.NetworkTopologySpec {
		if l.ParentTopologyLayer != "" {
			if _, ok := names[l.ParentTopologyLayer]; !ok {
				errs = append(errs, field.NotFound(p.Index(i).Child("parentTopologyLayer"), l.ParentTopologyLayer))
			}
		}
	}
	if root < 0 && len(errs) == 0 {
		errs = append(errs, field.Required(p, "one layer must have no parentTopologyLayer"))
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	var out []Layer
	seen := map[int]bool{}
	for i := root; i >= 0; {
		if seen[i] {
			return nil, field.ErrorList{field.Invalid(p, "", "parentTopologyLayer links form a cycle")}.ToAggregate()
		}
		seen[i] = true
		l := spec.NetworkTopologySpec[i]
		if l.TopologyLayer == topologyv1alpha1.NodeTopologyLayer {
			break
		}
		out = append(out, Layer{Name: l.TopologyLayer, LabelKeys: l.LabelKey})
		next, ok := byParent[l.TopologyLayer]
		if !ok {
			break
		}
		i = next
	}
	if len(seen) != len(spec.NetworkTopologySpec) {
		return nil, field.ErrorList{field.Invalid(p, "", "the layers do not form one chain from the top layer down")}.ToAggregate()
	}
	return out, nil
}

// Node is a node's name and labels.
type Node struct {
	Name   string
	Labels map[string]string
}

// Domain is one domain of a layer above the nodes.
type Domain struct {
	// Layer is the index in Tree.Layers.
	Layer    int
	Name     string
	Parent   *Domain
	Children []*Domain
	// Nodes are the nodes directly below a domain of the lowest layer,
	// sorted by name.
	Nodes []string
	// Index is the domain's position in Tree.All: dense from 0, so that
	// callers can keep per-domain state in slices.
	Index int
}

// Unplaced is a node the tree cannot hold and why.
type Unplaced struct {
	Node   string
	Reason string
}

// Tree is the network as the node labels describe it.
type Tree struct {
	Layers []Layer
	// Roots are the domains of the top layer.
	Roots []*Domain
	// Domains indexes every domain by layer, then name.
	Domains []map[string]*Domain
	// All lists every domain, layer by layer from the top, by name within
	// a layer; Domain.Index is the position here.
	All []*Domain
	// Leaf maps each placed node to its domain in the lowest layer.
	Leaf map[string]*Domain
	// Unplaced lists nodes missing a label or with conflicting ones.
	Unplaced []Unplaced
}

// Build places every node in the tree. With no layers every node is its
// own domain under one implicit root and nothing is unplaced.
func Build(layers []Layer, nodes []Node) *Tree {
	t := &Tree{Layers: layers, Leaf: map[string]*Domain{}}
	t.Domains = make([]map[string]*Domain, len(layers))
	for i := range t.Domains {
		t.Domains[i] = map[string]*Domain{}
	}
	sorted := append([]Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, n := range sorted {
		if len(layers) == 0 {
			continue
		}
		path, reason := t.path(n)
		if reason != "" {
			t.Unplaced = append(t.Unplaced, Unplaced{Node: n.Name, Reason: reason})
			continue
		}
		t.insert(n.Name, path)
	}
	for _, m := range t.Domains {
		for _, d := range m {
			sort.Strings(d.Nodes)
			sort.Slice(d.Children, func(i, j int) bool { return d.Children[i].Name < d.Children[j].Name })
		}
	}
	sort.Slice(t.Roots, func(i, j int) bool { return t.Roots[i].Name < t.Roots[j].Name })
	for _, m := range t.Domains {
		start := len(t.All)
		for _, d := range m {
			t.All = append(t.All, d)
		}
		layer := t.All[start:]
		sort.Slice(layer, func(i, j int) bool { return layer[i].Name < layer[j].Name })
	}
	for i, d := range t.All {
		d.Index = i
	}
	return t
}

// path reads a node's domain in each layer, or why it has none.
func (t *Tree) path(n Node) ([]string, string) {
	path := make([]string, len(t.Layers))
	for i, l := range t.Layers {
		var values []string
		for _, k := range l.LabelKeys {
			if v, ok := n.Labels[k]; ok && v != "" {
				values = append(values, k+"="+v)
				if path[i] == "" {
					path[i] = v
				} else if path[i] != v {
					return nil, fmt.Sprintf("conflicting labels for layer %s: %s", l.Name, strings.Join(values, ", "))
				}
			}
		}
		if path[i] == "" {
			return nil, fmt.Sprintf("no label for layer %s (looked for %s)", l.Name, strings.Join(l.LabelKeys, ", "))
		}
		if i > 0 {
			if d, ok := t.Domains[i][path[i]]; ok && d.Parent.Name != path[i-1] {
				return nil, fmt.Sprintf("%s %s is under %s %s, but the node's labels put it under %s", l.Name, path[i], t.Layers[i-1].Name, d.Parent.Name, path[i-1])
			}
		}
	}
	return path, ""
}

func (t *Tree) insert(node string, path []string) {
	var parent *Domain
	for i, name := range path {
		d, ok := t.Domains[i][name]
		if !ok {
			d = &Domain{Layer: i, Name: name, Parent: parent}
			t.Domains[i][name] = d
			if parent == nil {
				t.Roots = append(t.Roots, d)
			} else {
				parent.Children = append(parent.Children, d)
			}
		}
		parent = d
	}
	parent.Nodes = append(parent.Nodes, node)
	t.Leaf[node] = parent
}

// LayerIndex returns a layer's index, len(Layers) for the node layer, or
// -1 if there is no such layer.
func (t *Tree) LayerIndex(name string) int {
	if name == topologyv1alpha1.NodeTopologyLayer {
		return len(t.Layers)
	}
	for i, l := range t.Layers {
		if l.Name == name {
			return i
		}
	}
	return -1
}

// NodeCount counts the nodes under a domain.
func (d *Domain) NodeCount() int {
	n := len(d.Nodes)
	for _, c := range d.Children {
		n += c.NodeCount()
	}
	return n
}

// Ancestor returns the domain of a node in a layer.
func (t *Tree) Ancestor(node string, layer int) *Domain {
	d := t.Leaf[node]
	for d != nil && d.Layer > layer {
		d = d.Parent
	}
	return d
}
