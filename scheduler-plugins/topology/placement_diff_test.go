package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-sh/strata/internal/topotree"
)

// bytes hands out the input one byte at a time, then zeros.
type bytes struct {
	data []byte
	i    int
}

func (b *bytes) next() int {
	if b.i >= len(b.data) {
		return 0
	}
	b.i++
	return int(b.data[b.i-1])
}

func (b *bytes) left() bool { return b.i < len(b.data) }

// placeCase turns bytes into a tree and a gang's request, in the manner
// of FuzzBuild: up to three layers, each with a second label key; node
// labels that may be missing, conflict, or put a domain under two
// parents (those nodes are unplaced); room from -1 to 5 or none; members
// placed on a few nodes, some outside the tree; rules on any layer, with
// multiples, now and then an unknown layer or strategy. The rest of the
// input after the request is node labels.
func placeCase(data []byte) (*topotree.Tree, Request) {
	in := &bytes{data: data}
	var layers []topotree.Layer
	for i := range in.next() % 4 {
		layers = append(layers, topotree.Layer{Name: fmt.Sprint("L", i), LabelKeys: []string{fmt.Sprint("k", i), fmt.Sprint("k", i, "-alt")}})
	}
	req := Request{Pods: in.next() % 24, Capacity: map[string]int{}, Placed: map[string]int{}}
	for i := 0; i <= len(layers); i++ {
		v := in.next()
		name := "NodeTopologyLayer"
		if i < len(layers) {
			name = layers[i].Name
		}
		strategy := []topotree.Strategy{"", topotree.MustGather, topotree.PreferGather}[v%3]
		switch {
		case v == 255:
			strategy = "Gather"
		case v == 254:
			name = "RackLayer"
		}
		if strategy != "" {
			req.Rules = append(req.Rules, topotree.Rule{Layer: name, Strategy: strategy, PodCountMultiple: v / 3 % 4})
		}
	}
	var nodes []topotree.Node
	for len(nodes) < 64 && in.left() {
		name := fmt.Sprint("n", len(nodes))
		labels := map[string]string{}
		for i := range layers {
			v := in.next()
			if x := v % 4; x != 0 {
				labels[layers[i].LabelKeys[0]] = fmt.Sprint("v", x)
			}
			if v&0x80 != 0 {
				labels[layers[i].LabelKeys[1]] = fmt.Sprint("v", v>>2&3)
			}
		}
		nodes = append(nodes, topotree.Node{Name: name, Labels: labels})
		if v := in.next(); v < 240 {
			req.Capacity[name] = v%7 - 1
		}
		if v := in.next(); v >= 200 {
			req.Placed[name] = v%4 - 1 // a negative count is nonsense, yet decided as before
			if v == 255 {
				req.Placed["outside"] = 1
				req.Capacity["outside"] = 3
			}
		}
	}
	return topotree.Build(layers, nodes), req
}

// samePlacement holds Place and Room.Place to the reference algorithm:
// the same plan, or the same error.
func samePlacement(t *testing.T, data []byte) {
	t.Helper()
	tree, req := placeCase(data)
	want, wantErr := refPlace(tree, req)
	got, err := Place(tree, req)
	compare(t, "Place", data, req, want, wantErr, got, err)

	// The same room reached by updates from other capacities.
	start := map[string]int{}
	for n, c := range req.Capacity {
		start[n] = 4 - c
	}
	room := NewRoom(tree, start)
	for n, c := range req.Capacity {
		room.Set(n, c)
	}
	got, err = room.Place(req)
	compare(t, "Room.Place", data, req, want, wantErr, got, err)
}

func compare(t *testing.T, way string, data []byte, req Request, want *Plan, wantErr error, got *Plan, err error) {
	t.Helper()
	var wf, gf *Failure
	switch {
	case (wantErr == nil) != (err == nil):
		t.Fatalf("%s %v on %v: error %v, reference %v", way, data, req, err, wantErr)
	case errors.As(wantErr, &wf) != errors.As(err, &gf) || (wf != nil && *wf != *gf):
		t.Fatalf("%s %v on %v: failure %#v, reference %#v", way, data, req, gf, wf)
	case err != nil && err.Error() != wantErr.Error():
		t.Fatalf("%s %v on %v: error %q, reference %q", way, data, req, err, wantErr)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s %v on %v: plan differs from the reference (-ref +got):\n%s", way, data, req, diff)
	}
}

// TestPlaceDecidesAsTheReference compares Place with the algorithm it
// replaced on many random trees and gangs.
func TestPlaceDecidesAsTheReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 1))
	for range 20000 {
		data := make([]byte, 8+rng.IntN(256))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		samePlacement(t, data)
	}
}

// TestPlaceDecidesAsTheReferenceAtScale does the same on three-tier
// clusters of a few hundred nodes with uneven blocks, where pruning and
// the histograms matter.
func TestPlaceDecidesAsTheReferenceAtScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 2))
	for range 300 {
		var nodes []topotree.Node
		for i := range 100 + rng.IntN(400) {
			block := rng.IntN(40)
			nodes = append(nodes, topotree.Node{Name: fmt.Sprintf("n%03d", i), Labels: map[string]string{
				"network.topology.nvidia.com/spine": fmt.Sprint("s", block%5),
				"network.topology.nvidia.com/block": fmt.Sprint("b", block),
			}})
		}
		tree := topotree.Build(seedLayers(), nodes)
		req := Request{Pods: 1 + rng.IntN(120), Capacity: map[string]int{}, Placed: map[string]int{}}
		for _, n := range nodes {
			req.Capacity[n.Name] = rng.IntN(4)
			if rng.IntN(100) == 0 {
				req.Placed[n.Name] = 1
			}
		}
		for _, layer := range []string{"SpineLayer", "BlockLayer", "NodeTopologyLayer"} {
			if s := rng.IntN(3); s > 0 {
				req.Rules = append(req.Rules, topotree.Rule{Layer: layer, Strategy: []topotree.Strategy{topotree.MustGather, topotree.PreferGather}[s-1], PodCountMultiple: rng.IntN(3)})
			}
		}
		want, wantErr := refPlace(tree, req)
		got, err := Place(tree, req)
		compare(t, "Place", nil, req, want, wantErr, got, err)
		got, err = NewRoom(tree, req.Capacity).Place(req)
		compare(t, "Room.Place", nil, req, want, wantErr, got, err)
	}
}

// FuzzPlace holds Place and Room.Place to the reference algorithm on
// trees and gangs the input picks (see placeCase).
func FuzzPlace(f *testing.F) {
	f.Add([]byte{2, 6, 1, 2, 0, 1, 1, 3, 0, 1, 2, 3, 0, 2, 2, 200})
	f.Add([]byte{2, 12, 2, 1, 2, 1, 1, 2, 0, 1, 2, 3, 0, 1, 1, 4, 0})
	f.Add([]byte{0, 5, 2, 1, 3, 0, 4, 210, 5, 0})
	f.Add([]byte{3, 9, 5, 2, 0, 1, 1, 1, 0x83, 3, 1, 2, 2, 2, 1, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		samePlacement(t, data)
	})
}
