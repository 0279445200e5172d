package gang

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// The capacity estimator counts what it can count cheaply and exactly:
// resources, pod slots, taints, node affinity and DRA devices. Whatever
// else can reject a member — inter-pod (anti-)affinity, topology spread,
// host ports, volumes, a plugin a user added to the profile — is asked of
// the scheduler's own Filter plugins: a representative member of each
// shape is run through PreFilter once, then through Filter on one node of
// each node class, with one more copy of the member added to the node
// (through the PreFilter extensions, as preemption simulates) until a
// plugin says no. A "one worker per node" gang thus plans one member per
// node instead of a dense plan Filter would reject on every retry.
//
// The probe member carries no resource requests and no claims: the
// estimator counts those, and leaving them out lets nodes that differ only
// in what is free share one probe.

// probeStateKey marks the cycle state of a probe: StrataGang's own
// PreFilter and Filter stand aside for it.
const probeStateKey fwk.StateKey = Name + "/probe"

func isProbe(state fwk.CycleState) bool { return marked(state, probeStateKey) }

// preFilterRunner is the part of the scheduler's framework that runs
// every PreFilter plugin of a profile; the Handle a plugin gets is that
// framework.
type preFilterRunner interface {
	RunPreFilterPlugins(ctx context.Context, state fwk.CycleState, pod *corev1.Pod) (*fwk.PreFilterResult, *fwk.Status, sets.Set[string])
}

// filterProbe answers how many members of one shape the Filter plugins
// let onto a node.
type filterProbe struct {
	h   fwk.Handle
	pod *corev1.Pod
	// state is the probe member's cycle state after PreFilter.
	state fwk.CycleState
	// rejected is set when PreFilter already rejects the member everywhere;
	// allowed, when PreFilter narrowed the nodes.
	rejected *fwk.Status
	allowed  sets.Set[string]
	// keepLabels are label keys the member's constraints name, which
	// therefore tell nodes apart.
	keepLabels sets.Set[string]
	// deep is set when members can turn each other away (pod affinity,
	// spread, host ports, volumes): then copies are added one by one.
	// Otherwise a node that passes one member passes any number, as far
	// as the Filter plugins go (resources and devices are counted apart).
	deep bool
	memo map[[32]byte]probeResult
	// classes caches each node's class: a probe lives for one plan or one
	// preemption, on one snapshot, while the victim search asks again and
	// again.
	classes map[string][32]byte
}

type probeResult struct {
	fit    int  // members that passed
	closed bool // a plugin rejected member fit+1
	reason string
}

// newFilterProbe runs PreFilter for a member of the shape; nil when the
// handle cannot run plugins (unit tests with a bare handle).
func newFilterProbe(ctx context.Context, h fwk.Handle, member *corev1.Pod) *filterProbe {
	runner, ok := h.(preFilterRunner)
	if !ok {
		return nil
	}
	pod := member.DeepCopy()
	pod.Spec.ResourceClaims = nil
	pod.Status.ResourceClaimStatuses = nil
	pod.Spec.Overhead = nil
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Resources = corev1.ResourceRequirements{}
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Resources = corev1.ResourceRequirements{}
	}
	pod.Spec.Resources = nil
	state := framework.NewCycleState()
	state.Write(probeStateKey, mark{})
	pr := &filterProbe{h: h, pod: pod, state: state, keepLabels: labelKeysNamed(pod), deep: selfInteracting(pod), memo: map[[32]byte]probeResult{}, classes: map[string][32]byte{}}
	res, st, _ := runner.RunPreFilterPlugins(ctx, state, pod)
	switch {
	case !st.IsSuccess():
		pr.rejected = st
	case !res.AllNodes():
		pr.allowed = res.NodeNames
	}
	return pr
}

// limit returns how many of up to want members the Filter plugins allow
// on the node, and why not more.
func (pr *filterProbe) limit(ctx context.Context, ni fwk.NodeInfo, want int) limit {
	if pr.rejected != nil {
		return limit{reason: statusReason(pr.rejected)}
	}
	if pr.allowed != nil && !pr.allowed.Has(ni.Node().Name) {
		return limit{reason: "PreFilter: node not among the plugins' candidates"}
	}
	key, known := pr.classes[ni.Node().Name]
	if !known {
		key = pr.classOf(ni)
		pr.classes[ni.Node().Name] = key
	}
	r, ok := pr.memo[key]
	if !ok || (!r.closed && r.fit < want) {
		if pr.deep {
			r = pr.run(ctx, ni, want)
		} else if r = pr.run(ctx, ni, 1); r.fit == 1 {
			r = probeResult{fit: math.MaxInt}
		}
		pr.memo[key] = r
	}
	if r.fit >= want {
		return limit{count: want}
	}
	return limit{count: r.fit, reason: r.reason}
}

// run adds members to a copy of the node until Filter rejects one or want
// passed.
func (pr *filterProbe) run(ctx context.Context, ni fwk.NodeInfo, want int) probeResult {
	node := ni.Snapshot()
	state := pr.state.Clone()
	for k := 0; k < want; k++ {
		if st := pr.h.RunFilterPlugins(ctx, state, pr.pod, node); !st.IsSuccess() {
			return probeResult{fit: k, closed: true, reason: statusReason(st)}
		}
		cp := pr.pod.DeepCopy()
		cp.Name = fmt.Sprintf("%s-probe-%d", pr.pod.Name, k)
		cp.UID = types.UID(fmt.Sprintf("%s-probe-%d", pr.pod.UID, k))
		cp.Spec.NodeName = node.Node().Name
		pi, err := framework.NewPodInfo(cp)
		if err != nil {
			return probeResult{fit: k + 1, closed: true, reason: err.Error()}
		}
		node.AddPodInfo(pi)
		if st := pr.h.RunPreFilterExtensionAddPod(ctx, state, pr.pod, pi, node); !st.IsSuccess() {
			return probeResult{fit: k + 1, closed: true, reason: statusReason(st)}
		}
	}
	return probeResult{fit: want}
}

// statusReason renders a plugin's rejection: "InterPodAffinity: node(s)
// didn't match pod anti-affinity rules".
func statusReason(st *fwk.Status) string {
	msg := strings.Join(st.Reasons(), "; ")
	if msg == "" {
		msg = st.Code().String()
	}
	if st.Plugin() != "" {
		return st.Plugin() + ": " + msg
	}
	return msg
}

// classOf hashes what the Filter plugins can see of a node, short of
// resources: its labels (without the hostname, unless the member's
// constraints name it), taints, whether it is cordoned, and the pods on
// it by namespace, labels, host ports and required anti-affinity.
func (pr *filterProbe) classOf(ni fwk.NodeInfo) [32]byte {
	h := sha256.New()
	write := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	n := ni.Node()
	for _, k := range sortedKeys(n.Labels) {
		if k == corev1.LabelHostname && !pr.keepLabels.Has(k) {
			continue
		}
		write(k + "=" + n.Labels[k])
	}
	for _, t := range n.Spec.Taints {
		write(t.Key + "=" + t.Value + ":" + string(t.Effect))
	}
	write(fmt.Sprint(n.Spec.Unschedulable))
	var pods []string
	for _, pi := range ni.GetPods() {
		p := pi.GetPod()
		var b strings.Builder
		b.WriteString(p.Namespace)
		for _, k := range sortedKeys(p.Labels) {
			b.WriteString("," + k + "=" + p.Labels[k])
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.HostPort > 0 {
					fmt.Fprintf(&b, ",port=%s/%s/%d", port.HostIP, port.Protocol, port.HostPort)
				}
			}
		}
		if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			fmt.Fprintf(&b, ",anti=%v", a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		}
		pods = append(pods, b.String())
	}
	sort.Strings(pods)
	for _, p := range pods {
		write(p)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// selfInteracting reports whether members of a shape can keep each other
// off a node: pod (anti-)affinity, topology spread, host ports, volumes.
func selfInteracting(pod *corev1.Pod) bool {
	if a := pod.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		return true
	}
	if len(pod.Spec.TopologySpreadConstraints) > 0 {
		return true
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				return true
			}
		}
	}
	return false
}

// labelKeysNamed returns the node label keys a pod's node selector and
// node affinity name.
func labelKeysNamed(pod *corev1.Pod) sets.Set[string] {
	keys := sets.New[string]()
	for k := range pod.Spec.NodeSelector {
		keys.Insert(k)
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			for _, t := range r.NodeSelectorTerms {
				for _, e := range t.MatchExpressions {
					keys.Insert(e.Key)
				}
			}
		}
	}
	return keys
}
