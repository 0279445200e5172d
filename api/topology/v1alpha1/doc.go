// Package v1alpha1 is the topology.strata.sh API: ClusterNetworkTopology,
// the layers of a cluster's network (spine > block > node) and the node
// labels that place each node in them.
//
// +kubebuilder:object:generate=true
// +groupName=topology.strata.sh
package v1alpha1
