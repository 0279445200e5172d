package devicecount

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"
)

// Demand is what a pod's ResourceClaims ask, by resource name.
type Demand struct {
	// Devices is how many devices the pod's unallocated claims take on
	// whichever node it goes to.
	Devices map[corev1.ResourceName]int64
	// All holds names with a request for all matching devices
	// (allocationMode All): the pod takes every free one on the node.
	All sets.Set[corev1.ResourceName]
	// Used holds every name the pod's claims use, allocated or not.
	Used sets.Set[corev1.ResourceName]
}

// On returns the devices the pod adds under name on a node with count.
func (d Demand) On(name corev1.ResourceName, count NodeCount) int64 {
	n := d.Devices[name]
	if d.All.Has(name) {
		n += max(count.Allocatable-count.Allocated, 0)
	}
	return n
}

// Demand reads the pod's claims. Per request it counts the first
// alternative (firstAvailable) or the exact request; admin-access
// requests take nothing. An allocated claim takes nothing more: its
// devices are already allocated on the node it is allocated for. A claim
// that does not exist yet (generated from a template) is skipped.
func (c *Counter) Demand(pod *corev1.Pod, classes Classes) (Demand, error) {
	d := Demand{Devices: map[corev1.ResourceName]int64{}, All: sets.New[corev1.ResourceName](), Used: sets.New[corev1.ResourceName]()}
	if len(classes) == 0 || len(pod.Spec.ResourceClaims) == 0 {
		return d, nil
	}
	byClass := classes.byClass()
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue // not generated yet, or not needed
		}
		claim, err := c.dra.ResourceClaims().Get(pod.Namespace, *name)
		if errors.Is(err, assumecache.ErrNotFound) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return d, fmt.Errorf("get ResourceClaim %s/%s: %w", pod.Namespace, *name, err)
		}
		d.add(claim, byClass)
	}
	return d, nil
}

func (d Demand) add(claim *resourceapi.ResourceClaim, byClass map[string][]corev1.ResourceName) {
	if alloc := claim.Status.Allocation; alloc != nil {
		for _, r := range alloc.Devices.Results {
			d.Used.Insert(byClass[resultClass(claim, r.Request)]...)
		}
		return
	}
	for _, req := range claim.Spec.Devices.Requests {
		class, mode, count, admin := "", resourceapi.DeviceAllocationModeExactCount, int64(1), false
		switch {
		case req.Exactly != nil:
			e := req.Exactly
			class, mode, count, admin = e.DeviceClassName, e.AllocationMode, e.Count, ptr.Deref(e.AdminAccess, false)
		case len(req.FirstAvailable) > 0:
			s := req.FirstAvailable[0]
			class, mode, count = s.DeviceClassName, s.AllocationMode, s.Count
		}
		if admin {
			continue
		}
		for _, name := range byClass[class] {
			d.Used.Insert(name)
			if mode == resourceapi.DeviceAllocationModeAll {
				d.All.Insert(name)
			} else {
				d.Devices[name] += max(count, 1)
			}
		}
	}
}

// resultClass returns the class of the (sub)request an allocation result
// names ("gpu" or "gpu/large").
func resultClass(claim *resourceapi.ResourceClaim, request string) string {
	main, sub, _ := strings.Cut(request, "/")
	for _, req := range claim.Spec.Devices.Requests {
		if req.Name != main {
			continue
		}
		if sub == "" && req.Exactly != nil {
			return req.Exactly.DeviceClassName
		}
		for _, s := range req.FirstAvailable {
			if s.Name == sub {
				return s.DeviceClassName
			}
		}
	}
	return ""
}
