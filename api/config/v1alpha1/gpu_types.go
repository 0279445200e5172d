package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GpuConfigKind is the kind of GpuConfig.
const GpuConfigKind = "GpuConfig"

// GpuConfig configures the NVIDIA devices (nvidia.strata.sh) of a claim.
//
// +kubebuilder:object:root=true
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`

	// Sharing selects how a shared GPU (DeviceClass nvidia-shared.strata.sh)
	// is isolated between the claims that share it. It is only valid for
	// shared devices.
	//
	// +optional
	Sharing *GpuSharing `json:"sharing,omitempty"`
}

// SharingStrategy names an isolation mechanism for a shared GPU.
//
// +kubebuilder:validation:Enum=HAMiCore;MPS;TimeSlicing;None
type SharingStrategy string

// Sharing strategies.
const (
	// SharingHAMiCore enforces the claim's memory and compute share inside
	// the container with the HAMi-core CUDA interposer library.
	SharingHAMiCore SharingStrategy = "HAMiCore"
	// SharingMPS runs the claim's processes as clients of the GPU's CUDA
	// MPS server, with per-client thread and memory limits.
	SharingMPS SharingStrategy = "MPS"
	// SharingTimeSlicing lets processes take turns on the whole GPU; the
	// share is a scheduling promise only.
	SharingTimeSlicing SharingStrategy = "TimeSlicing"
	// SharingNone gives the container the GPU with no limit.
	SharingNone SharingStrategy = "None"
)

// GpuSharing configures a shared GPU.
type GpuSharing struct {
	// Strategy is the isolation mechanism.
	//
	// +required
	Strategy SharingStrategy `json:"strategy"`

	// HAMiCore tunes the HAMi-core limits; only with strategy HAMiCore.
	//
	// +optional
	HAMiCore *HAMiCoreConfig `json:"hamiCore,omitempty"`

	// MPS tunes the MPS client limits; only with strategy MPS.
	//
	// +optional
	MPS *MPSConfig `json:"mps,omitempty"`
}

// HAMiCoreConfig overrides the limits HAMi-core enforces. By default they
// are the capacity the claim consumes from the shared device (cores and
// memory); an override may only lower them.
type HAMiCoreConfig struct {
	// CoreLimit caps the share of the GPU's streaming multiprocessors, in
	// percent.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	CoreLimit *int32 `json:"coreLimit,omitempty"`

	// MemoryLimit caps the device memory the container can allocate.
	//
	// +optional
	MemoryLimit *resource.Quantity `json:"memoryLimit,omitempty"`
}

// MPSConfig overrides the limits of the claim's MPS clients. By default
// they are the capacity the claim consumes (cores as active thread
// percentage, memory as pinned device memory limit).
type MPSConfig struct {
	// ActiveThreadPercentage caps the share of threads the clients use.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	ActiveThreadPercentage *int32 `json:"activeThreadPercentage,omitempty"`

	// PinnedMemoryLimit caps the device memory the clients can pin.
	//
	// +optional
	PinnedMemoryLimit *resource.Quantity `json:"pinnedMemoryLimit,omitempty"`
}
