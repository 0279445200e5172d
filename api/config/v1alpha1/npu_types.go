package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NpuConfigKind is the kind of NpuConfig.
const NpuConfigKind = "NpuConfig"

// NpuConfig configures the Ascend devices (ascend.strata.sh) of a claim.
//
// +kubebuilder:object:root=true
type NpuConfig struct {
	metav1.TypeMeta `json:",inline"`

	// Driver says what of the host's Ascend driver the containers get:
	// Mount (the default) mounts its user-space libraries, version file,
	// DCMI library and npu-smi read-only at their host paths, as Ascend's
	// container runtime does; None mounts nothing, for images that carry
	// a driver user space matching the host's.
	//
	// +optional
	Driver NpuDriverMode `json:"driver,omitempty"`
}

// NpuDriverMode is what of the host's driver a container gets.
//
// +kubebuilder:validation:Enum=Mount;None
type NpuDriverMode string

// Driver modes.
const (
	NpuDriverMount NpuDriverMode = "Mount"
	NpuDriverNone  NpuDriverMode = "None"
)
