// Package testutil holds object builders and helpers shared by Strata's
// unit and end-to-end tests.
package testutil

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod starts a pod with one container named "main" in namespace
// "default".
func MakePod(name string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}}
}

// Namespace sets the namespace.
func (p *PodWrapper) Namespace(ns string) *PodWrapper { p.Pod.Namespace = ns; return p }

// Scheduler sets spec.schedulerName.
func (p *PodWrapper) Scheduler(name string) *PodWrapper { p.Spec.SchedulerName = name; return p }

// Label adds a label.
func (p *PodWrapper) Label(k, v string) *PodWrapper {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}

// Req sets the main container's CPU and memory requests.
func (p *PodWrapper) Req(cpu, memory string) *PodWrapper {
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
	}
	return p
}

// ClaimTemplate adds a pod claim generated from a template and makes the
// main container use it.
func (p *PodWrapper) ClaimTemplate(podClaim, template string) *PodWrapper {
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: podClaim, ResourceClaimTemplateName: ptr.To(template)})
	p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: podClaim})
	return p
}

// Claim adds an existing ResourceClaim and makes the main container use it.
func (p *PodWrapper) Claim(podClaim, claim string) *PodWrapper {
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: podClaim, ResourceClaimName: ptr.To(claim)})
	p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: podClaim})
	return p
}

// Obj returns the pod.
func (p *PodWrapper) Obj() *corev1.Pod { return p.Pod.DeepCopy() }

// ClaimSpecWrapper builds a DeviceClaim used by claims and templates.
type ClaimSpecWrapper struct{ resourceapi.DeviceClaim }

// MakeClaimSpec starts an empty device claim.
func MakeClaimSpec() *ClaimSpecWrapper { return &ClaimSpecWrapper{} }

// Request adds a request for count devices of a class, each matching
// every CEL selector.
func (c *ClaimSpecWrapper) Request(name, class string, count int64, cel ...string) *ClaimSpecWrapper {
	req := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, Count: count, AllocationMode: resourceapi.DeviceAllocationModeExactCount,
	}}
	for _, expr := range cel {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	c.Requests = append(c.Requests, req)
	return c
}

// Capacity makes the last request ask each of its devices for the given
// capacities ("vcore": "10", "vmemory": "1Gi").
func (c *ClaimSpecWrapper) Capacity(requests map[string]string) *ClaimSpecWrapper {
	req := c.Requests[len(c.Requests)-1].Exactly
	req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
	for name, v := range requests {
		req.Capacity.Requests[resourceapi.QualifiedName(name)] = resource.MustParse(v)
	}
	return c
}

// MatchAttribute requires the devices of the requests (all if none) to
// share an attribute value.
func (c *ClaimSpecWrapper) MatchAttribute(attr string, requests ...string) *ClaimSpecWrapper {
	c.Constraints = append(c.Constraints, resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attr))})
	return c
}

// Config adds opaque driver parameters for the requests (all if none).
func (c *ClaimSpecWrapper) Config(driver string, params runtime.RawExtension, requests ...string) *ClaimSpecWrapper {
	c.DeviceClaim.Config = append(c.DeviceClaim.Config, resourceapi.DeviceClaimConfiguration{
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: params},
		},
	})
	return c
}

// Template returns a ResourceClaimTemplate with this spec.
func (c *ClaimSpecWrapper) Template(namespace, name string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: *c.DeviceClaim.DeepCopy()}},
	}
}

// Claim returns a ResourceClaim with this spec.
func (c *ClaimSpecWrapper) Claim(namespace, name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       resourceapi.ResourceClaimSpec{Devices: *c.DeviceClaim.DeepCopy()},
	}
}
