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
	// SharingTimeSlicing lets processes take turns on the whole GPU with
	// the driver's time-slice scheduler; the share is a scheduling promise
	// only (no memory or fault isolation).
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

	// TimeSlicing sets the GPU's time slice; only with strategy
	// TimeSlicing.
	//
	// +optional
	TimeSlicing *TimeSlicingConfig `json:"timeSlicing,omitempty"`

	// ComputeShare says what compute a claim may use when it reserved no
	// cores (it asked only for memory): Proportional (the default) limits
	// it to the fraction of the GPU's memory it holds, Unlimited lets it
	// use whatever compute is idle. Enforced by HAMiCore and MPS; a
	// DeviceClass config sets it for every claim of the class.
	//
	// +optional
	ComputeShare ComputeShare `json:"computeShare,omitempty"`

	// MPS tunes the MPS client limits; only with strategy MPS.
	//
	// +optional
	MPS *MPSConfig `json:"mps,omitempty"`
}

// ComputeShare is the compute limit of a claim that reserved no cores.
//
// +kubebuilder:validation:Enum=Proportional;Unlimited
type ComputeShare string

// Compute shares.
const (
	ComputeShareProportional ComputeShare = "Proportional"
	ComputeShareUnlimited    ComputeShare = "Unlimited"
)

// TimeSliceInterval names one of the driver's time-slice lengths, as
// nvidia-smi compute-policy --set-timeslice numbers them.
//
// +kubebuilder:validation:Enum=Default;Short;Medium;Long
type TimeSliceInterval string

// Time-slice intervals.
const (
	TimeSliceDefault TimeSliceInterval = "Default"
	TimeSliceShort   TimeSliceInterval = "Short"
	TimeSliceMedium  TimeSliceInterval = "Medium"
	TimeSliceLong    TimeSliceInterval = "Long"
)

// TimeSliceIntervals lists the intervals in the driver's numbering (0-3).
var TimeSliceIntervals = []TimeSliceInterval{TimeSliceDefault, TimeSliceShort, TimeSliceMedium, TimeSliceLong}

// TimeSlicingConfig sets how long each process runs before the GPU
// switches to the next. The setting is per GPU: every claim time-slicing
// one GPU must ask for the same interval.
type TimeSlicingConfig struct {
	// Interval is the time slice; Default if empty.
	//
	// +optional
	Interval TimeSliceInterval `json:"interval,omitempty"`
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
