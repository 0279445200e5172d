package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion of the PodGroup API.
var GroupVersion = schema.GroupVersion{Group: "scheduling.sigs.k8s.io", Version: "v1alpha1"}

// PodGroupLabel is the pod label that names a pod's PodGroup.
const PodGroupLabel = "pod-group.scheduling.sigs.k8s.io"

// Gang annotations: Strata's keys, and Koordinator's under their own
// prefix, which Strata reads too. A gang may be declared on its pods
// alone, with the name and min-available keys.
const (
	AnnotationPrefix            = "scheduling.strata.sh/"
	KoordinatorAnnotationPrefix = "gang.scheduling.koordinator.sh/"
	// FromPodAnnotationsLabel ("true") marks a PodGroup that
	// strata-controller keeps for a gang declared on pod annotations
	// alone: it carries the gang's status and counts, the pods keep its
	// definition, and it is deleted with the gang's last pod.
	FromPodAnnotationsLabel = AnnotationPrefix + "from-pod-annotations"
)

// GangAnnotation returns a gang annotation by key ("name",
// "min-available", ...), Strata's key first, and the full key it was
// read from.
func GangAnnotation(ann map[string]string, key string) (value, from string, ok bool) {
	if v, ok := ann[AnnotationPrefix+key]; ok {
		return v, AnnotationPrefix + key, true
	}
	if v, ok := ann[KoordinatorAnnotationPrefix+key]; ok {
		return v, KoordinatorAnnotationPrefix + key, true
	}
	return "", "", false
}

// AnnotatedGang returns the name of the gang a pod declares with
// annotations alone: "" when it names a PodGroup by label or by
// spec.schedulingGroup, or no gang.
func AnnotatedGang(pod *corev1.Pod) string {
	if pod.Labels[PodGroupLabel] != "" || (pod.Spec.SchedulingGroup != nil && pod.Spec.SchedulingGroup.PodGroupName != nil && *pod.Spec.SchedulingGroup.PodGroupName != "") {
		return ""
	}
	name, _, _ := GangAnnotation(pod.Annotations, "name")
	return name
}

// PodGroupPhase is the community API's summary of a group.
type PodGroupPhase string

// Phases of the community API.
const (
	PodGroupPending       PodGroupPhase = "Pending"
	PodGroupRunning       PodGroupPhase = "Running"
	PodGroupScheduling    PodGroupPhase = "Scheduling"
	PodGroupScheduled     PodGroupPhase = "Scheduled"
	PodGroupFinished      PodGroupPhase = "Finished"
	PodGroupFailed        PodGroupPhase = "Failed"
	PodGroupUnknown       PodGroupPhase = "Unknown"
	PodGroupPreScheduling PodGroupPhase = "PreScheduling"
)

// Condition types Strata sets on PodGroups.
const (
	// ConditionScheduled is True once minMember pods are bound; False with
	// reason Unschedulable and a message naming the closest domain and what
	// was missing while the gang waits.
	ConditionScheduled = "Scheduled"
)

// PodGroup is a gang: its pods are bound all together, or not at all.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pg;pgs
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-sigs/scheduler-plugins/pull/50"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="MinMember",type=integer,JSONPath=`.spec.minMember`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.running`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec PodGroupSpec `json:"spec,omitempty"`
	// +optional
	Status PodGroupStatus `json:"status,omitempty"`
}

// PodGroupSpec is the gang's requirement.
type PodGroupSpec struct {
	// MinMember is the number of pods that must be placed together.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinMember int32 `json:"minMember,omitempty"`

	// MinResources is the least the group needs in total (informational
	// for Strata, which places the pods themselves).
	//
	// +optional
	MinResources corev1.ResourceList `json:"minResources,omitempty"`

	// ScheduleTimeoutSeconds is how long placed members wait for the rest
	// before all are released.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

// PodGroupStatus is the group's observed state.
type PodGroupStatus struct {
	// +optional
	Phase PodGroupPhase `json:"phase,omitempty"`
	// +optional
	OccupiedBy string `json:"occupiedBy,omitempty"`
	// +optional
	Running int32 `json:"running,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// +optional
	ScheduleStartTime metav1.Time `json:"scheduleStartTime,omitempty"`

	// Conditions are Strata's: Scheduled.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodGroupList is a list of PodGroups.
//
// +kubebuilder:object:root=true
type PodGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodGroup `json:"items"`
}

// AddToScheme registers the types.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PodGroup{}, &PodGroupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
