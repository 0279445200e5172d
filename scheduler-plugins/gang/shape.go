package gang

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// A gang's members need not be alike: an MPI launcher asks for CPU only
// while its workers ask for eight GPUs each, a PyTorch master claims
// other devices than its workers. Members with the same shape — the same
// resource requests, the same claims (by template or claim name) and the
// same scheduling constraints — are interchangeable, so the plan counts
// members per shape and each member only sees its own shape's nodes.
//
// Labels and volumes stay out of the shape: frameworks give every member
// its own index label and claim, and a shape per member would defeat the
// grouping. A constraint that depends on them is still honoured: the
// framework's Filter plugins, run on a representative member of each
// shape, bound how many members a node takes (probe.go), and Filter
// itself runs for every member.

// shape is one kind of member of a gang.
type shape struct {
	key string
	// pod is a pending member of this shape, the one capacity and the
	// probes are computed for.
	pod *corev1.Pod
	// pending counts the members of this shape to place.
	pending int
}

// shapeKey identifies a member's shape.
func shapeKey(pod *corev1.Pod) string {
	type claimRef struct {
		Name, Template, Claim string `json:",omitempty"`
	}
	var v struct {
		Requests     corev1.ResourceList               `json:",omitempty"`
		Claims       []claimRef                        `json:",omitempty"`
		NodeSelector map[string]string                 `json:",omitempty"`
		Affinity     *corev1.Affinity                  `json:",omitempty"`
		Tolerations  []corev1.Toleration               `json:",omitempty"`
		Spread       []corev1.TopologySpreadConstraint `json:",omitempty"`
		HostPorts    []corev1.ContainerPort            `json:",omitempty"`
	}
	v.Requests = resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for _, c := range pod.Spec.ResourceClaims {
		ref := claimRef{Name: c.Name}
		if c.ResourceClaimTemplateName != nil {
			ref.Template = *c.ResourceClaimTemplateName
		}
		if c.ResourceClaimName != nil {
			ref.Claim = *c.ResourceClaimName
		}
		v.Claims = append(v.Claims, ref)
	}
	v.NodeSelector, v.Affinity, v.Tolerations, v.Spread = pod.Spec.NodeSelector, pod.Spec.Affinity, pod.Spec.Tolerations, pod.Spec.TopologySpreadConstraints
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.HostPort > 0 {
				v.HostPorts = append(v.HostPorts, port)
			}
		}
	}
	raw, _ := json.Marshal(v) // plain API types: cannot fail
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// sortShapes orders shapes by how hard their members are to place, so
// that the scarcest room goes first: members whose claims are allocated
// already (they can go to one place only), then members with claims or
// extended resources before those without, then the shape with more
// members, then the key for a stable order.
func sortShapes(shapes []*shape) {
	weight := func(s *shape) int {
		w := len(s.pod.Spec.ResourceClaims)
		for name := range resourcehelper.PodRequests(s.pod, resourcehelper.PodResourcesOptions{}) {
			if scarce(name) {
				w++
			}
		}
		return w
	}
	sort.SliceStable(shapes, func(i, j int) bool {
		a, b := shapes[i], shapes[j]
		if pa, pb := allocatedShape(a.key), allocatedShape(b.key); pa != pb {
			return pa
		}
		if wa, wb := weight(a), weight(b); (wa > 0) != (wb > 0) {
			return wa > 0
		}
		if a.pending != b.pending {
			return a.pending > b.pending
		}
		return a.key < b.key
	})
}

// shapeStateKey carries a member's shape from PreFilter to Filter and
// Reserve, so that Filter, which runs per node, does not hash the pod.
const shapeStateKey fwk.StateKey = Name + "/shape"

type shapeState string

func (s shapeState) Clone() fwk.StateData { return s }

// shapeFromState returns the shape PreFilter recorded, or computes it.
func (p *Plugin) shapeFromState(state fwk.CycleState, pod *corev1.Pod) string {
	if state != nil {
		if v, err := state.Read(shapeStateKey); err == nil {
			return string(v.(shapeState))
		}
	}
	return p.shapeOf(pod)
}

// shapeOf is a member's shape: its shapeKey, and where its claims that
// are allocated already can be used. Such a member (its bind failed
// after PreBind wrote the allocation, or the scheduler that wrote it
// stopped before binding) needs no more devices and goes only where its
// allocation is, while the other members of its template need devices
// anywhere: they are not interchangeable. Had they one shape, whichever
// member the plan was computed for would decide for all of them — every
// member sent to the allocation's node, or the allocated member sent
// elsewhere — and the gang would be planned again and again where it
// cannot go.
func (p *Plugin) shapeOf(pod *corev1.Pod) string {
	key := shapeKey(pod)
	if p.capacity == nil {
		return key
	}
	if pin := p.capacity.allocationKey(pod); pin != "" {
		sum := sha256.Sum256([]byte(pin))
		key += allocatedMark + hex.EncodeToString(sum[:8])
	}
	return key
}

// allocatedMark separates a shape's key from where its members' claims
// are allocated.
const allocatedMark = "@"

// allocatedShape tells whether the members of a shape have claims
// allocated already.
func allocatedShape(key string) bool { return strings.Contains(key, allocatedMark) }

// scarce tells a resource a node has little of (extended resources,
// devices) from CPU, memory, ephemeral storage and pod slots.
func scarce(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods:
		return false
	}
	return true
}
