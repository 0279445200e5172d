// Package v1alpha1 is the community PodGroup API (scheduling.sigs.k8s.io,
// as kubernetes-sigs/scheduler-plugins defines it), which Strata's gang
// scheduling reads. Strata adds status conditions that explain why a gang
// is pending; the rest of the schema is unchanged so that existing
// manifests and clients keep working.
//
// +kubebuilder:object:generate=true
// +groupName=scheduling.sigs.k8s.io
package v1alpha1
