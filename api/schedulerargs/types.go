package schedulerargs

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScoringType says which end of a resource's utilisation a node scores
// best at.
type ScoringType string

const (
	// LeastAllocated prefers nodes with more of the resource left after
	// the pod: (allocatable - requested) * 100 / allocatable.
	LeastAllocated ScoringType = "LeastAllocated"
	// MostAllocated prefers nodes with less of the resource left after
	// the pod (bin packing): requested * 100 / allocatable.
	MostAllocated ScoringType = "MostAllocated"
)

// ScoringTypes lists the supported scoring types, in the order error
// messages name them.
var ScoringTypes = []ScoringType{LeastAllocated, MostAllocated}

// NodeResourcesFitPlusArgs configures NodeResourcesFitPlus: a scoring
// type and weight per resource. A resource name stands for the node
// resource of that name (cpu, memory, ephemeral-storage, extended
// resources) and for the DRA devices of every DeviceClass with that name
// or with that spec.extendedResourceName.
//
// +kubebuilder:object:root=true
type NodeResourcesFitPlusArgs struct {
	metav1.TypeMeta `json:",inline"`

	// Resources maps resource names to how they are scored. Resources
	// the pod does not request are not scored. Required, non-empty.
	Resources map[corev1.ResourceName]ResourcesType `json:"resources"`
}

// ResourcesType is how one resource is scored.
type ResourcesType struct {
	// Type is LeastAllocated or MostAllocated. Required.
	Type ScoringType `json:"type"`
	// Weight of the resource in the node's score, 1 to 100; 0 or absent
	// means 1.
	Weight int64 `json:"weight"`
}

// ScarceResourceAvoidanceArgs configures ScarceResourceAvoidance: the
// scarce resources that pods which do not request them should leave
// alone. Names are read as in NodeResourcesFitPlusArgs.
//
// +kubebuilder:object:root=true
type ScarceResourceAvoidanceArgs struct {
	metav1.TypeMeta `json:",inline"`

	// Resources lists the scarce resources. Required, non-empty, no
	// duplicates.
	Resources []corev1.ResourceName `json:"resources,omitempty"`
}

// StrataFragmentationArgs configures StrataFragmentation, the score
// plugin that places GPU pods where the cluster's expected lost GPU grows
// least (package scheduler-plugins/fragment).
//
// +kubebuilder:object:root=true
type StrataFragmentationArgs struct {
	metav1.TypeMeta `json:",inline"`

	// DeviceClasses whose devices are the GPUs measured, and whose
	// requests in a pod's claims are its GPU demand. Default:
	// nvidia-gpu.strata.sh and nvidia-shared.strata.sh.
	DeviceClasses []string `json:"deviceClasses,omitempty"`
	// MIGDeviceClasses whose devices are MIG placements of those GPUs
	// (devices with "profile", "placementStart" and "placementSize"
	// attributes that draw on their GPU's counter set, as the NVIDIA
	// plugin publishes them in dynamic MIG mode), and whose requests in a
	// pod's claims are its MIG demand. Default: nvidia-mig.strata.sh.
	MIGDeviceClasses []string `json:"migDeviceClasses,omitempty"`
	// UnreachableWeight weighs GPU no copy of a task shape can reach
	// (FGD's fragment) against GPU its packed copies leave stranded, in
	// percent: 1000 (the default) counts it ten times. 0 to 10000.
	UnreachableWeight *int32 `json:"unreachableWeight,omitempty"`
	// CoveragePercent keeps the most frequent task shapes up to this
	// share of the pods seen. 1 to 100, default 95.
	CoveragePercent int32 `json:"coveragePercent,omitempty"`
	// HalfLifePods is how many pods it takes for a seen pod's weight in
	// the expected mix to halve. 0 keeps every pod's weight; default
	// 20000.
	HalfLifePods *int32 `json:"halfLifePods,omitempty"`
}
