package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion of the topology API.
var GroupVersion = schema.GroupVersion{Group: "topology.strata.sh", Version: "v1alpha1"}

// NodeTopologyLayer is the name of the bottom layer, whose domains are the
// nodes themselves; it needs no label key.
const NodeTopologyLayer = "NodeTopologyLayer"

// ClusterNetworkTopology describes the layers of the cluster network, from
// the top (spine) down to the node. The controller keeps its status: the
// domains of each layer and the nodes that could not be placed.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cnt
// +kubebuilder:printcolumn:name="Layers",type=integer,JSONPath=`.status.layerCount`
// +kubebuilder:printcolumn:name="Unplaced",type=integer,JSONPath=`.status.unplacedNodeCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterNetworkTopology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ClusterNetworkTopologySpec `json:"spec"`
	// +optional
	Status ClusterNetworkTopologyStatus `json:"status,omitempty"`
}

// ClusterNetworkTopologySpec lists the layers.
type ClusterNetworkTopologySpec struct {
	// NetworkTopologySpec lists the layers in any order; parentTopologyLayer
	// links them into one chain from the top layer (no parent) down to
	// NodeTopologyLayer.
	//
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=topologyLayer
	// +kubebuilder:validation:XValidation:rule="self.filter(l, !has(l.parentTopologyLayer) || l.parentTopologyLayer == '').size() == 1",message="exactly one layer must have no parentTopologyLayer"
	// +kubebuilder:validation:XValidation:rule="self.all(l, !has(l.parentTopologyLayer) || l.parentTopologyLayer == '' || self.exists(p, p.topologyLayer == l.parentTopologyLayer))",message="every parentTopologyLayer must name a layer of this list"
	NetworkTopologySpec []NetworkTopologyLayer `json:"networkTopologySpec"`
}

// NetworkTopologyLayer is one layer of the network.
type NetworkTopologyLayer struct {
	// TopologyLayer names the layer, e.g. SpineLayer, BlockLayer.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	TopologyLayer string `json:"topologyLayer"`

	// ParentTopologyLayer is the layer above; empty for the top layer.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ParentTopologyLayer string `json:"parentTopologyLayer,omitempty"`

	// LabelKey lists the node labels that hold a node's domain in this
	// layer, in order of preference: topology labellers have used several
	// key generations, and a node is placed by the first key it has. Empty
	// only for NodeTopologyLayer.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=8
	LabelKey []string `json:"labelKey,omitempty"`
}

// ClusterNetworkTopologyStatus is the tree as the controller built it.
type ClusterNetworkTopologyStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Valid (the spec describes one chain of layers) and
	// Complete (every node is placed).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LayerCount is the number of layers.
	// +optional
	LayerCount int32 `json:"layerCount,omitempty"`

	// Layers describes each layer from the top down.
	// +optional
	Layers []LayerStatus `json:"layers,omitempty"`

	// Domains lists the domains of every layer above the nodes.
	// +optional
	Domains []DomainStatus `json:"domains,omitempty"`

	// UnplacedNodeCount is the number of nodes missing from the tree.
	// +optional
	UnplacedNodeCount int32 `json:"unplacedNodeCount,omitempty"`

	// UnplacedNodes lists up to 100 nodes missing from the tree and why
	// (missing or conflicting labels).
	// +optional
	UnplacedNodes []UnplacedNode `json:"unplacedNodes,omitempty"`
}

// LayerStatus counts a layer's domains.
type LayerStatus struct {
	Layer   string `json:"layer"`
	Domains int32  `json:"domains"`
}

// DomainStatus is one domain above the node layer.
type DomainStatus struct {
	Layer string `json:"layer"`
	Name  string `json:"name"`
	// +optional
	Parent string `json:"parent,omitempty"`
	Nodes  int32  `json:"nodes"`
}

// UnplacedNode is a node the tree does not include.
type UnplacedNode struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// ClusterNetworkTopologyList is a list of ClusterNetworkTopology.
//
// +kubebuilder:object:root=true
type ClusterNetworkTopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterNetworkTopology `json:"items"`
}

// AddToScheme registers the types.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ClusterNetworkTopology{}, &ClusterNetworkTopologyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
