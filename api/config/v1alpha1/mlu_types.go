package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MluConfigKind is the kind of MluConfig.
const MluConfigKind = "MluConfig"

// MluConfig configures the Cambricon devices (cambricon.strata.sh) of a
// claim.
//
// +kubebuilder:object:root=true
type MluConfig struct {
	metav1.TypeMeta `json:",inline"`

	// Cnmon says whether the containers get the host's cnmon: Mount (the
	// default) bind-mounts it read-only at its host path, as Cambricon's
	// device plugin does, so that a workload can read its cards' and
	// sMLU's state; None leaves it out.
	//
	// +optional
	Cnmon MluToolMode `json:"cnmon,omitempty"`
}

// MluToolMode is whether a container gets a host tool.
//
// +kubebuilder:validation:Enum=Mount;None
type MluToolMode string

// Tool modes.
const (
	MluToolMount MluToolMode = "Mount"
	MluToolNone  MluToolMode = "None"
)
