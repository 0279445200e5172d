package topology

import topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"

// nodeLayerName is the layer a plan on one node names.
const nodeLayerName = topologyv1alpha1.NodeTopologyLayer

// onOneNode places the whole gang on one node (MustGather on the node
// layer, or PreferGather when a node can take it): the node with the
// least room that holds it, then by name; with members placed, only a
// node holding some. Without members placed, only the domains of the
// lowest layer whose histogram has that least room are read node by node.
func (p *placer) onOneNode(need int) (*Plan, error) {
	m := p.mult[len(p.t.Layers)]
	var node string
	if p.total > 0 {
		node = p.tightestNode(need, func(yield func(string, int)) {
			for n, v := range p.req.Placed {
				if c, ok := p.r.Get(n); ok && v != 0 {
					yield(n, floorTo(c, m))
				}
			}
		})
	} else {
		node = p.tightestFreeNode(need)
	}
	if node == "" {
		return nil, p.closestNode(need)
	}
	return &Plan{Nodes: map[string]int{node: need}, Layer: nodeLayerName, Domain: node}, nil
}

// tightestNode returns the node with the least room of at least need,
// then the first by name, or "".
func (p *placer) tightestNode(need int, nodes func(func(string, int))) string {
	best, bestCap := "", -1
	nodes(func(n string, c int) {
		if c >= need && (best == "" || c < bestCap || (c == bestCap && n < best)) {
			best, bestCap = n, c
		}
	})
	return best
}

// tightestFreeNode is tightestNode over every node of the room.
func (p *placer) tightestFreeNode(need int) string {
	m := p.mult[len(p.t.Layers)]
	least := -1
	for _, b := range p.r.all {
		if v := floorTo(b.v, m); v >= need {
			least = v // the histogram runs from the most room down
		}
	}
	if least < 0 {
		return ""
	}
	return p.tightestNode(need, func(yield func(string, int)) {
		if len(p.t.Layers) == 0 {
			for n, c := range p.r.caps {
				if v := floorTo(c, m); v == least {
					yield(n, v)
				}
			}
			return
		}
		for _, d := range p.t.All {
			if len(d.Children) > 0 || !hasRoom(p.r.hist[d.Index], m, least) {
				continue
			}
			for _, n := range d.Nodes {
				if v := p.r.room(n, m); v == least {
					yield(n, v)
				}
			}
		}
	})
}

func hasRoom(h []bucket, m, v int) bool {
	for _, b := range h {
		if floorTo(b.v, m) == v {
			return true
		}
	}
	return false
}

// closestNode is the failure of a gang that no node holds: the node with
// the most room (then by name) among those it may use.
func (p *placer) closestNode(need int) *Failure {
	m := p.mult[len(p.t.Layers)]
	best, bestCap := "", -1
	for n, c := range p.r.caps {
		if !p.r.inTree(n) || (p.total > 0 && p.req.Placed[n] == 0) {
			continue
		}
		if v := floorTo(c, m); v > bestCap || (v == bestCap && n < best) {
			best, bestCap = n, v
		}
	}
	return &Failure{Layer: nodeLayerName, Domain: best, Fit: max(bestCap, 0), Need: need}
}
