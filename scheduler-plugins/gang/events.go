package gang

import (
	"context"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// EventsToRegister implements fwk.EnqueueExtensions. A gang member that
// failed is retried only when an event can change its gang's answer;
// every hint says why it queues. Without hints, every pod update in the
// cluster (a status change of any running pod) would retry every waiting
// gang, and a gang that cannot fit would spin through the scheduler,
// each attempt costing a plan over every node.
//
// Every event that queues a member also moves the generation the gang's
// fail-fast answer is keyed by (snapshotGeneration): hints run before the
// member is moved, so its next PreFilter looks again.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	events := []fwk.ClusterEventWithHint{
		// A new member can complete a gang; a pod of another gang or a
		// lone pod takes room, it does not free any.
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add}, QueueingHintFn: p.hintMemberAdded},
		// A pod that goes away frees room, and may be a victim of this
		// gang's preemption.
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
		// A pod that finished frees room; a member that changed (bound,
		// nominated, relabelled) changes the gang's own count.
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: p.hintPodUpdated},
		// Nodes that appear, or change what they offer, labels or taints.
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Update}, QueueingHintFn: hintNodeChanged},
		// A claim released frees devices; a member's own claim being
		// created lets its plan be computed.
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.hintClaimChanged},
		// New or changed devices.
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update}},
		// The gang's PodGroup edited (not its status, which the scheduler
		// and the controller write).
		{Event: fwk.ClusterEvent{Resource: podGroupEvents, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.hintPodGroupChanged},
		{Event: fwk.ClusterEvent{Resource: fwk.PodGroup, ActionType: fwk.Add | fwk.Update}},
		// A new network topology changes every domain.
		{Event: fwk.ClusterEvent{Resource: topologyEvents, ActionType: fwk.Add | fwk.Update}},
	}
	for i := range events {
		events[i].QueueingHintFn = p.counted(events[i].QueueingHintFn)
	}
	return events, nil
}

// counted wraps a hint (nil: always queue) so that a member queued again
// moves p.requeued.
func (p *Plugin) counted(hint fwk.QueueingHintFn) fwk.QueueingHintFn {
	return func(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
		h, err := fwk.Queue, error(nil)
		if hint != nil {
			h, err = hint(logger, pod, oldObj, newObj)
		}
		if h == fwk.Queue || err != nil { // an error queues the pod too
			p.requeued.Add(1)
		}
		return h, err
	}
}

// inGroup reports whether other belongs to the gang group of pod.
func (p *Plugin) inGroup(pod, other *corev1.Pod) bool {
	key, okey := gangKeyOf(pod), gangKeyOf(other)
	if key == "" || okey == "" {
		return false
	}
	if key == okey {
		return true
	}
	for _, k := range p.specByKey(key, pod).group {
		if k == okey {
			return true
		}
	}
	return false
}

func (p *Plugin) hintMemberAdded(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	if added, ok := newObj.(*corev1.Pod); ok && p.inGroup(pod, added) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func (p *Plugin) hintPodUpdated(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, _ := oldObj.(*corev1.Pod)
	newPod, ok := newObj.(*corev1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if finished(newPod) && (oldPod == nil || !finished(oldPod)) {
		return fwk.Queue, nil
	}
	// The ResourceClaim controller names a member's generated claims in
	// its status after creating them. The claim's own event can reach the
	// queue before that status does, and the member is then refused again
	// as "waiting for the ResourceClaim"; without this it would wait for
	// the queue's periodic flush.
	if claimStatusesChanged(oldPod, newPod) && (newPod.UID == pod.UID || p.inGroup(pod, newPod)) {
		return fwk.Queue, nil
	}
	if newPod.UID != pod.UID && p.inGroup(pod, newPod) && (oldPod == nil || oldPod.Spec.NodeName != newPod.Spec.NodeName ||
		!reflect.DeepEqual(oldPod.Labels, newPod.Labels) || oldPod.Status.NominatedNodeName != newPod.Status.NominatedNodeName) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// claimStatusesChanged says whether an update named generated claims.
func claimStatusesChanged(o, n *corev1.Pod) bool {
	if o == nil {
		return len(n.Status.ResourceClaimStatuses) > 0 || n.Status.ExtendedResourceClaimStatus != nil
	}
	return !reflect.DeepEqual(o.Status.ResourceClaimStatuses, n.Status.ResourceClaimStatuses) ||
		!reflect.DeepEqual(o.Status.ExtendedResourceClaimStatus, n.Status.ExtendedResourceClaimStatus)
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func hintNodeChanged(_ klog.Logger, _ *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	o, _ := oldObj.(*corev1.Node)
	n, ok := newObj.(*corev1.Node)
	if !ok || o == nil {
		return fwk.Queue, nil
	}
	if o.Spec.Unschedulable != n.Spec.Unschedulable || !reflect.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
		!reflect.DeepEqual(o.Labels, n.Labels) || !reflect.DeepEqual(o.Status.Allocatable, n.Status.Allocatable) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil // heartbeats and conditions
}

func (p *Plugin) hintClaimChanged(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	o, _ := oldObj.(*resourceapi.ResourceClaim)
	c, ok := newObj.(*resourceapi.ResourceClaim)
	if !ok {
		return fwk.Queue, nil
	}
	if o != nil && o.Status.Allocation != nil && c.Status.Allocation == nil {
		return fwk.Queue, nil // deallocated: devices freed
	}
	if c.Namespace != pod.Namespace {
		return fwk.QueueSkip, nil
	}
	// A claim generated for a member of the gang (its owner).
	for _, ref := range c.OwnerReferences {
		if ref.Kind != "Pod" {
			continue
		}
		if ref.UID == pod.UID {
			return fwk.Queue, nil
		}
		if owner, err := p.pods.Pods(c.Namespace).Get(ref.Name); err == nil && owner.UID == ref.UID && p.inGroup(pod, owner) {
			return fwk.Queue, nil
		}
	}
	// A claim named by the pod itself.
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil && *pc.ResourceClaimName == c.Name {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

func (p *Plugin) hintPodGroupChanged(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	n, err := meta.Accessor(newObj)
	if err != nil {
		return fwk.Queue, nil
	}
	key := n.GetNamespace() + "/" + n.GetName()
	mine := gangKeyOf(pod) == key
	if !mine {
		for _, k := range p.specByKey(gangKeyOf(pod), pod).group {
			mine = mine || k == key
		}
	}
	if !mine {
		return fwk.QueueSkip, nil
	}
	if oldObj == nil {
		return fwk.Queue, nil
	}
	o, err := meta.Accessor(oldObj)
	if err != nil || o.GetGeneration() != n.GetGeneration() || !reflect.DeepEqual(o.GetAnnotations(), n.GetAnnotations()) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil // a status write
}
