package scarceavoid

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/strata-sh/strata/api/schedulerargs"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
)

// Name of the plugin in the scheduler configuration, as in Koordinator.
const Name = "ScarceResourceAvoidance"

// Plugin scores down nodes with scarce resources the pod does not use.
type Plugin struct {
	scarce   sets.Set[corev1.ResourceName]
	requests resourcehelper.PodResourcesOptions
	devices  *devicecount.Counter
	prepared devicecount.Lazy[*state]
}

var (
	_ fwk.PreScorePlugin = (*Plugin)(nil)
	_ fwk.ScorePlugin    = (*Plugin)(nil)
	_ fwk.SignPlugin     = (*Plugin)(nil)
)

// New creates the plugin from ScarceResourceAvoidanceArgs, after
// validating them; the error names the invalid field, and the scheduler
// does not start.
func New(_ context.Context, obj runtime.Object, h fwk.Handle, fts feature.Features) (fwk.Plugin, error) {
	args := &schedulerargs.ScarceResourceAvoidanceArgs{}
	switch a := obj.(type) {
	case nil:
	case *schedulerargs.ScarceResourceAvoidanceArgs:
		if a != nil {
			args = a
		}
	default:
		return nil, fmt.Errorf("want args of type ScarceResourceAvoidanceArgs, got %T", obj)
	}
	if errs := args.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s args: %w", Name, errs.ToAggregate())
	}
	var dra fwk.SharedDRAManager
	if h != nil {
		dra = h.SharedDRAManager()
	}
	p := &Plugin{
		scarce: sets.New(args.Resources...),
		requests: resourcehelper.PodResourcesOptions{
			UseStatusResources:    fts.EnableInPlacePodVerticalScaling,
			SkipPodLevelResources: !fts.EnablePodLevelResources,
		},
		devices: devicecount.New(dra, args.Resources, fts),
	}
	p.prepared = devicecount.Lazy[*state]{Key: stateKey, Handle: h, Prepare: p.prepare}
	return p, nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

const stateKey fwk.StateKey = Name + "/types"

// state is what PreScore (or else the cycle's first Score) works out for
// the pod's cycle; Score only reads it.
type state struct {
	// pod holds the resource types the pod requests.
	pod sets.Set[corev1.ResourceName]
	// dra lists the args' resources that stand for DRA devices the pod
	// does not request, and devices counts them on each node.
	dra     []corev1.ResourceName
	devices *devicecount.NodeCounts
}

func (s *state) Clone() fwk.StateData { return s }

// PreScore implements fwk.PreScorePlugin: it reads the pod's resource
// types and, if an arg stands for DRA devices the pod does not use,
// counts them on the nodes to score.
func (p *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, err := p.prepare(ctx, cs, pod, nodes)
	if err != nil {
		return fwk.AsStatus(err)
	}
	cs.Write(stateKey, s)
	return nil
}

// prepare works out a cycle's state: the pod's resource types, and the
// devices of the given nodes under the args' names that stand for DRA
// devices the pod does not use.
func (p *Plugin) prepare(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*state, error) {
	s := &state{pod: podTypes(resourcehelper.PodRequests(pod, p.requests))}
	classes, err := p.devices.Classes()
	if err != nil {
		return nil, err
	}
	if len(classes) > 0 {
		d, err := p.devices.Demand(pod, classes)
		if err != nil {
			return nil, err
		}
		s.pod = s.pod.Union(d.Used)
		// A type the pod requests is never unrequested: no need to
		// count its devices.
		classes = classes.Restrict(sets.KeySet(classes).Difference(s.pod))
	}
	if len(classes) > 0 {
		if s.devices, err = p.devices.Nodes(ctx, cs, classes, nodes, false); err != nil {
			return nil, err
		}
		s.dra = classes.Names()
	}
	return s, nil
}

// Score implements fwk.ScorePlugin.
func (p *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := p.prepared.Get(ctx, cs, pod, ni)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	var unrequested, scarce int64
	count := func(name corev1.ResourceName) {
		if !s.pod.Has(name) {
			unrequested++
			if p.scarce.Has(name) {
				scarce++
			}
		}
	}
	alloc := ni.GetAllocatable()
	if alloc.GetMilliCPU() > 0 {
		count(corev1.ResourceCPU)
	}
	if alloc.GetMemory() > 0 {
		count(corev1.ResourceMemory)
	}
	if alloc.GetEphemeralStorage() > 0 {
		count(corev1.ResourceEphemeralStorage)
	}
	scalars := alloc.GetScalarResources()
	for name, q := range scalars {
		if q > 0 {
			count(name)
		}
	}
	for _, name := range s.dra {
		if scalars[name] <= 0 && s.devices.Get(ni.Node().Name, name).Allocatable > 0 {
			count(name)
		}
	}
	return score(unrequested, scarce), nil
}

// ScoreExtensions implements fwk.ScorePlugin: scores are not normalized.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// SignPod implements fwk.SignPlugin.
func (p *Plugin) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return p.devices.SignPod(pod, resourcehelper.PodRequests(pod, p.requests))
}

// score is Koordinator's formula: the share of the node's unrequested
// resource types that are not scarce, 0 to 100.
func score(unrequested, scarce int64) int64 {
	if unrequested == 0 || scarce == 0 {
		return fwk.MaxNodeScore
	}
	return (unrequested - scarce) * fwk.MaxNodeScore / unrequested
}

// podTypes are the resources a pod requests, as Koordinator reads them.
func podTypes(requests corev1.ResourceList) sets.Set[corev1.ResourceName] {
	out := sets.New[corev1.ResourceName]()
	for name, q := range requests {
		if q.Sign() > 0 {
			out.Insert(name)
		}
	}
	return out
}
