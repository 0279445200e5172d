package devicecount

import (
	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// RequestsSignerName keys the sign fragment of a pod's resource requests
// (resourcehelper.PodRequests) that the device-counting plugins return.
// It is not fwk.ResourcesSignerName: the framework keeps one value per
// key, and NodeResourcesFit's value for that key is another encoding.
const RequestsSignerName = "v1.Pod.Spec.PodRequests()"

// SignPod tells the scheduler which pods it may batch (place one after
// another on one ranking): those with the same requests, as long as no
// devices are involved. A pod with ResourceClaims is refused, as the
// DynamicResources plugin does, and so is one that requests an extended
// resource that stands for devices, whose count the ranking does not
// follow.
func (c *Counter) SignPod(pod *corev1.Pod, requests corev1.ResourceList) ([]fwk.SignFragment, *fwk.Status) {
	if len(pod.Spec.ResourceClaims) > 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with resource claims are not signable")
	}
	classes, err := c.Classes()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	for name, q := range requests {
		if _, ok := classes[name]; ok && q.Sign() > 0 {
			return nil, fwk.NewStatus(fwk.Unschedulable, "pods requesting devices through an extended resource are not signable")
		}
	}
	return []fwk.SignFragment{{Key: RequestsSignerName, Value: requests}}, nil
}
