package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/internal/topotree"
)

// Job-level preemption for groups of the upstream workload API
// (scheduling.k8s.io/v1beta1 PodGroups). kube-scheduler schedules such a
// group in one pod-group cycle and, when the group does not fit, runs the
// profile's PodGroupPostFilter plugins in order until one answers Success
// or UnschedulableAndUnresolvable. The in-tree pod-group preemption
// (DefaultPreemption) simulates evictions by taking pods off the nodes,
// which frees none of their DRA devices, so it never makes room for a
// group whose members need devices.
//
// StrataGang runs before it and answers for exactly those groups: a
// group with a pod that needs devices through DRA is preempted for as a
// Strata gang is (whole lower-priority jobs, the devices of their claims
// counted as freed, a victim group evicted whole when its disruptionMode
// is All), and StrataGang answers Success or UnschedulableAndUnresolvable
// for it, never Unschedulable, so DefaultPreemption never acts on it. For
// every other group it answers Unschedulable and does nothing, and
// DefaultPreemption decides alone. Composite groups are left to the
// in-tree preemption too.

// PodGroupPostFilter implements fwk.PodGroupPostFilterPlugin: an
// upstream group whose pods need DRA devices evicts lower-priority jobs
// as a whole if that makes room for all its unscheduled pods, which are
// then nominated to the nodes freed for them; otherwise nothing is
// evicted. Groups whose pods need no devices, and composite groups, are
// left to the PodGroupPostFilter plugins after StrataGang.
func (p *Plugin) PodGroupPostFilter(ctx context.Context, _ fwk.PodGroupCycleState, pgInfo fwk.PodGroupInfo, _ fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	pg, pods := pgInfo.GetPodGroup(), pgInfo.GetUnscheduledPods()
	if pg == nil || len(pods) == 0 || !p.preemptsGroup(pods) {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	key := pg.Namespace + "/" + pg.Name
	g := p.specByKey(key, pods[0])
	if !g.upstream {
		// A Strata PodGroup of the same name is read before the upstream
		// one (specByKey): to Strata these pods are not that group.
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if g.err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, g.err.Error())
	}
	if upstreamPreemptsNever(pg, pods) {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("gang %s: preemptionPolicy is Never, so nothing was evicted", key))
	}
	start := time.Now()
	nominated, st := p.preemptFor(ctx, pods[0], withUpstreamRules(g, pg), pods)
	observePreemption(start, st)
	switch {
	case st.IsSuccess():
		klog.FromContext(ctx).V(2).Info("Nominating upstream group members", "podGroup", klog.KObj(pg), "pods", len(nominated))
		return &fwk.PodGroupPostFilterResult{NominatingInfos: nominatingInfos(pods, nominated)},
			fwk.NewStatus(fwk.Success, fmt.Sprintf("gang %s: evicting lower-priority jobs to make room; its pods are nominated to the nodes freed", key))
	case st.IsError():
		return nil, st
	case p.jobs.Holds(key):
		// The group's preemption is under way: its victims terminate, or
		// their claims are not released yet. Answered Success, as the
		// in-tree preemption answers an ongoing one, the members keep
		// their nominated nodes (the scheduler clears that of a member
		// it could place in a group that failed, unless a plugin
		// nominates it) and wait for the room.
		return &fwk.PodGroupPostFilterResult{NominatingInfos: p.currentNominations(pods)}, fwk.NewStatus(fwk.Success, st.Message())
	}
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, st.Message())
}

// preemptsGroup reports whether StrataGang, not the in-tree pod-group
// preemption, preempts for an upstream group: one of its pods needs
// devices through DRA, by a ResourceClaim or by an extended resource that
// a DeviceClass maps. Pods' claims and requests do not change, so a group
// is never handed from one preemption to the other between its cycles.
func (p *Plugin) preemptsGroup(pods []*corev1.Pod) bool {
	for _, pod := range pods {
		if len(pod.Spec.ResourceClaims) > 0 {
			return true
		}
		if claim, _ := p.capacity.extendedAsDevices(pod, resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})); claim != nil {
			return true
		}
	}
	return false
}

// upstreamPreemptsNever reports whether an upstream group may not
// preempt: its preemptionPolicy, or, where the cluster does not serve
// that field, its pods' (the scheduler requires them to agree with the
// group's), is Never.
func upstreamPreemptsNever(pg *schedulingv1beta1.PodGroup, pods []*corev1.Pod) bool {
	if pol := pg.Spec.PreemptionPolicy; pol != nil && *pol == schedulingv1beta1.PreemptNever {
		return true
	}
	for _, pod := range pods {
		if pol := pod.Spec.PreemptionPolicy; pol != nil && *pol == corev1.PreemptNever {
			return true
		}
	}
	return false
}

// withUpstreamRules returns the gang of an upstream group placed as the
// pod-group cycle places it: inside one domain of its topology
// constraint's key, if it has one (see treeFor), and by no Strata
// annotation rule, which that cycle does not read.
func withUpstreamRules(g *gangSpec, pg *schedulingv1beta1.PodGroup) *gangSpec {
	c := *g
	c.rules = nil
	if sc := pg.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 && sc.Topology[0].Key != "" {
		c.rules = []topotree.Rule{{Layer: sc.Topology[0].Key, Strategy: topotree.MustGather}}
	}
	return &c
}

// treeFor builds the network a gang's preemption is planned in: the
// ClusterNetworkTopology's, or, for an upstream group, one layer for each
// of its rules, named after the node label key that places nodes in it
// (withUpstreamRules). Nodes without the label are in no domain and take
// no member, as in the pod-group cycle.
func (p *Plugin) treeFor(g *gangSpec, nodes []fwk.NodeInfo) (*topotree.Tree, error) {
	if !g.upstream {
		return p.tree(nodes)
	}
	layers := make([]topotree.Layer, 0, len(g.rules))
	for _, r := range g.rules {
		layers = append(layers, topotree.Layer{Name: r.Layer, LabelKeys: []string{r.Layer}})
	}
	in := make([]topotree.Node, 0, len(nodes))
	for _, ni := range nodes {
		if n := ni.Node(); n != nil {
			in = append(in, topotree.Node{Name: n.Name, Labels: n.Labels})
		}
	}
	return topotree.Build(layers, in), nil
}

// nominatingInfos turns the nodes chosen for the pods of a group's cycle
// into the scheduler's nominations.
func nominatingInfos(pods []*corev1.Pod, nominated map[types.UID]string) map[types.NamespacedName]*fwk.NominatingInfo {
	out := make(map[types.NamespacedName]*fwk.NominatingInfo, len(nominated))
	for _, pod := range pods {
		if node, ok := nominated[pod.UID]; ok && node != "" {
			out[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = &fwk.NominatingInfo{NominatedNodeName: node, NominatingMode: fwk.ModeOverride}
		}
	}
	return out
}

// currentNominations returns the nominated nodes the pods of a group
// carry, as the informer last showed them (the cycle's copies can be
// older than the scheduler's own write).
func (p *Plugin) currentNominations(pods []*corev1.Pod) map[types.NamespacedName]*fwk.NominatingInfo {
	out := map[types.NamespacedName]*fwk.NominatingInfo{}
	for _, pod := range pods {
		node := pod.Status.NominatedNodeName
		if cur, err := p.pods.Pods(pod.Namespace).Get(pod.Name); err == nil && cur.UID == pod.UID && cur.Status.NominatedNodeName != "" {
			node = cur.Status.NominatedNodeName
		}
		if node != "" {
			out[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = &fwk.NominatingInfo{NominatedNodeName: node, NominatingMode: fwk.ModeOverride}
		}
	}
	return out
}

// announcePreempted tells a gang's PodGroup what was evicted for it, with
// an event: on Strata's PodGroup (statusWriter.preempted), or on the
// upstream one, whose condition the scheduler's pod-group cycle writes.
func (p *Plugin) announcePreempted(g *gangSpec, msg string) {
	if !g.upstream {
		p.status.preempted(g, msg)
		return
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(g.key)
	pg := p.upstreamPodGroup(ns, name)
	if pg == nil || p.status.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "PodGroup",
		Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID}
	p.status.recorder.Eventf(ref, nil, corev1.EventTypeNormal, ReasonPreempted, "Preempting", "%s", msg)
}

// observeBound drops the nomination of an upstream group once minCount
// of its pods are bound: the room it reserved is used. A Strata gang's
// goes when Permit lets the gang go; an upstream group passes the in-tree
// GangScheduling plugin's Permit instead, so its bound pods, as the
// informer shows them, end it.
func (p *Plugin) observeBound(pod *corev1.Pod) {
	if pod.Spec.NodeName == "" || pod.Spec.SchedulingGroup == nil {
		return
	}
	key := gangKeyOf(pod)
	if key == "" || !p.jobs.Nominated(key) {
		return
	}
	if g := p.specByKey(key, pod); g.upstream && p.boundEnough(g) {
		p.clearNomination(key)
	}
}
