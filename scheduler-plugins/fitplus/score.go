package fitplus

import (
	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/api/schedulerargs"
)

// resourceScore is Koordinator's score of one resource, 0 to 100, with
// the pod placed: requested includes the pod. A node without the
// resource scores 0 either way.
func resourceScore(t schedulerargs.ScoringType, requested, allocatable int64) int64 {
	if allocatable == 0 {
		return 0
	}
	switch t {
	case schedulerargs.MostAllocated:
		return min(requested, allocatable) * fwk.MaxNodeScore / allocatable
	case schedulerargs.LeastAllocated:
		if requested > allocatable {
			return 0
		}
		return (allocatable - requested) * fwk.MaxNodeScore / allocatable
	}
	return 0 // validation admits no other type
}

// nodeQuantities returns a node's allocatable and requested amounts of a
// resource as Koordinator reads them: non-zero requests for cpu and
// memory, plain ones otherwise. A node without allocatable of the
// resource requests none of it either: where its pods' requests of an
// extended resource are served by DRA devices, those devices are counted
// as allocated instead.
func nodeQuantities(ni fwk.NodeInfo, name corev1.ResourceName) (allocatable, requested int64) {
	alloc := ni.GetAllocatable()
	switch name {
	case corev1.ResourceCPU:
		return alloc.GetMilliCPU(), ni.GetNonZeroRequested().GetMilliCPU()
	case corev1.ResourceMemory:
		return alloc.GetMemory(), ni.GetNonZeroRequested().GetMemory()
	case corev1.ResourceEphemeralStorage:
		return alloc.GetEphemeralStorage(), ni.GetRequested().GetEphemeralStorage()
	}
	if a := alloc.GetScalarResources()[name]; a > 0 {
		return a, ni.GetRequested().GetScalarResources()[name]
	}
	return 0, 0
}

// quantity reads a request in the unit NodeInfo keeps it in.
func quantity(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q := l[name]
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}
