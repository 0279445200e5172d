package topotree

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
)

// seedLayers is the seeds' three-layer network: spine > block > node,
// with the old and the new NVIDIA topology label keys.
func seedLayers() topologyv1alpha1.ClusterNetworkTopologySpec {
	return topologyv1alpha1.ClusterNetworkTopologySpec{NetworkTopologySpec: []topologyv1alpha1.NetworkTopologyLayer{
		{TopologyLayer: "NodeTopologyLayer", ParentTopologyLayer: "BlockLayer"},
		{TopologyLayer: "BlockLayer", ParentTopologyLayer: "SpineLayer", LabelKey: []string{"network.topology.nvidia.com/block", "network.topology.nvidia.com/accelerator"}},
		{TopologyLayer: "SpineLayer", LabelKey: []string{"network.topology.nvidia.com/spine"}},
	}}
}

func TestLayers(t *testing.T) {
	layers, err := Layers(seedLayers())
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{layers[0].Name, layers[1].Name}; !cmp.Equal(got, []string{"SpineLayer", "BlockLayer"}) {
		t.Errorf("layers = %v", got)
	}
	bad := map[string]struct {
		spec topologyv1alpha1.ClusterNetworkTopologySpec
		want string
	}{
		"missing parent": {topologyv1alpha1.ClusterNetworkTopologySpec{NetworkTopologySpec: []topologyv1alpha1.NetworkTopologyLayer{
			{TopologyLayer: "SpineLayer", LabelKey: []string{"s"}},
			{TopologyLayer: "BlockLayer", ParentTopologyLayer: "RackLayer", LabelKey: []string{"b"}},
		}}, `spec.networkTopologySpec[1].parentTopologyLayer: Not found: "RackLayer"`},
		"two roots": {topologyv1alpha1.ClusterNetworkTopologySpec{NetworkTopologySpec: []topologyv1alpha1.NetworkTopologyLayer{
			{TopologyLayer: "SpineLayer", LabelKey: []string{"s"}},
			{TopologyLayer: "BlockLayer", LabelKey: []string{"b"}},
		}}, "only one layer may have no parent"},
		"no label key": {topologyv1alpha1.ClusterNetworkTopologySpec{NetworkTopologySpec: []topologyv1alpha1.NetworkTopologyLayer{
			{TopologyLayer: "SpineLayer"},
		}}, "spec.networkTopologySpec[0].labelKey: Required value"},
	}
	for name, tc := range bad {
		if _, err := Layers(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
	}
}

func TestBuildReportsUnplacedNodes(t *testing.T) {
	layers, _ := Layers(seedLayers())
	tree := Build(layers, []Node{
		{Name: "ok", Labels: map[string]string{"network.topology.nvidia.com/spine": "s0", "network.topology.nvidia.com/block": "b0"}},
		{Name: "new-key", Labels: map[string]string{"network.topology.nvidia.com/spine": "s0", "network.topology.nvidia.com/accelerator": "b1"}},
		{Name: "no-block", Labels: map[string]string{"network.topology.nvidia.com/spine": "s0"}},
		{Name: "conflict", Labels: map[string]string{"network.topology.nvidia.com/spine": "s0", "network.topology.nvidia.com/block": "b0", "network.topology.nvidia.com/accelerator": "b9"}},
		{Name: "wrong-spine", Labels: map[string]string{"network.topology.nvidia.com/spine": "s1", "network.topology.nvidia.com/block": "b0"}},
	})
	got := map[string]string{}
	for _, u := range tree.Unplaced {
		got[u.Node] = u.Reason
	}
	want := map[string]string{
		"no-block":    "no label for layer BlockLayer (looked for network.topology.nvidia.com/block, network.topology.nvidia.com/accelerator)",
		"conflict":    "conflicting labels for layer BlockLayer: network.topology.nvidia.com/block=b0, network.topology.nvidia.com/accelerator=b9",
		"wrong-spine": "BlockLayer b0 is under SpineLayer s0, but the node's labels put it under s1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unplaced (-want +got):\n%s", diff)
	}
	if tree.Leaf["new-key"] == nil || tree.Leaf["new-key"].Name != "b1" {
		t.Errorf("node with only the newer label key not placed in b1")
	}
}
