package fitplus

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/strata-sh/strata/api/schedulerargs"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
)

// Name of the plugin in the scheduler configuration, as in Koordinator.
const Name = "NodeResourcesFitPlus"

// Plugin scores nodes by the utilisation of each resource, with its own
// scoring type and weight.
type Plugin struct {
	resources map[corev1.ResourceName]schedulerargs.ResourcesType
	// requests reads which resources a pod requests; nonZero how much,
	// with the defaults for containers that request no cpu or memory.
	requests, nonZero resourcehelper.PodResourcesOptions
	devices           *devicecount.Counter
	prepared          devicecount.Lazy[*state]
}

var (
	_ fwk.PreScorePlugin = (*Plugin)(nil)
	_ fwk.ScorePlugin    = (*Plugin)(nil)
	_ fwk.SignPlugin     = (*Plugin)(nil)
)

// New creates the plugin from NodeResourcesFitPlusArgs, after defaulting
// and validating them; the error names the invalid field, and the
// scheduler does not start.
func New(_ context.Context, obj runtime.Object, h fwk.Handle, fts feature.Features) (fwk.Plugin, error) {
	args := &schedulerargs.NodeResourcesFitPlusArgs{}
	switch a := obj.(type) {
	case nil:
	case *schedulerargs.NodeResourcesFitPlusArgs:
		if a != nil {
			args = a.DeepCopy()
		}
	default:
		return nil, fmt.Errorf("want args of type NodeResourcesFitPlusArgs, got %T", obj)
	}
	args.Default()
	if errs := args.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s args: %w", Name, errs.ToAggregate())
	}
	var dra fwk.SharedDRAManager
	if h != nil {
		dra = h.SharedDRAManager()
	}
	requests := resourcehelper.PodResourcesOptions{
		UseStatusResources:    fts.EnableInPlacePodVerticalScaling,
		SkipPodLevelResources: !fts.EnablePodLevelResources,
	}
	nonZero := requests
	nonZero.NonMissingContainerRequests = corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(schedutil.DefaultMilliCPURequest, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(schedutil.DefaultMemoryRequest, resource.BinarySI),
	}
	p := &Plugin{
		resources: args.Resources,
		requests:  requests,
		nonZero:   nonZero,
		devices:   devicecount.New(dra, slices.Collect(maps.Keys(args.Resources)), fts),
	}
	p.prepared = devicecount.Lazy[*state]{Key: stateKey, Handle: h, Prepare: p.prepare}
	return p, nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

const stateKey fwk.StateKey = Name + "/scored"

// state is what PreScore (or else the cycle's first Score) works out for
// the pod's cycle; Score only reads it.
type state struct {
	scored  []scored
	devices *devicecount.NodeCounts
	demand  devicecount.Demand
}

// scored is one resource to score.
type scored struct {
	name corev1.ResourceName
	how  schedulerargs.ResourcesType
	// pod is the pod's request (non-zero for cpu and memory).
	pod int64
	// devices says whether the resource counts DRA devices too.
	devices bool
}

func (s *state) Clone() fwk.StateData { return s }

// PreScore implements fwk.PreScorePlugin: it picks the resources to score
// and, if any of them stands for DRA devices, counts the devices of the
// nodes to score.
func (p *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, err := p.prepare(ctx, cs, pod, nodes)
	if err != nil {
		return fwk.AsStatus(err)
	}
	cs.Write(stateKey, s)
	return nil
}

// prepare works out a cycle's state: the resources to score, and the
// devices of the given nodes if any of them stands for DRA devices.
func (p *Plugin) prepare(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*state, error) {
	names := sets.New[corev1.ResourceName]()
	for name, q := range resourcehelper.PodRequests(pod, p.requests) {
		if _, ok := p.resources[name]; ok && q.Sign() > 0 {
			names.Insert(name)
		}
	}
	s := &state{}
	classes, err := p.devices.Classes()
	if err != nil {
		return nil, err
	}
	if len(classes) > 0 {
		if s.demand, err = p.devices.Demand(pod, classes); err != nil {
			return nil, err
		}
		names = names.Union(s.demand.Used)
		classes = classes.Restrict(names)
	}
	if len(classes) > 0 {
		if s.devices, err = p.devices.Nodes(ctx, cs, classes, nodes, true); err != nil {
			return nil, err
		}
	}
	nonZero := resourcehelper.PodRequests(pod, p.nonZero)
	for _, name := range sets.List(names) {
		_, devices := classes[name]
		s.scored = append(s.scored, scored{name: name, how: p.resources[name], pod: quantity(nonZero, name), devices: devices})
	}
	klog.FromContext(ctx).V(5).Info("Resources to score", "pod", klog.KObj(pod), "resources", sets.List(names), "devices", classes.Names())
	return s, nil
}

// Score implements fwk.ScorePlugin.
func (p *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := p.prepared.Get(ctx, cs, pod, ni)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	var sum, weights int64
	for _, r := range s.scored {
		allocatable, requested := nodeQuantities(ni, r.name)
		requested += r.pod
		if r.devices {
			c := s.devices.Get(ni.Node().Name, r.name)
			allocatable += c.Allocatable
			requested += c.Allocated + s.demand.On(r.name, c)
		}
		sum += resourceScore(r.how.Type, requested, allocatable) * r.how.Weight
		weights += r.how.Weight
	}
	if weights == 0 {
		return fwk.MaxNodeScore, nil
	}
	return sum / weights, nil
}

// ScoreExtensions implements fwk.ScorePlugin: scores are not normalized.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// SignPod implements fwk.SignPlugin.
func (p *Plugin) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return p.devices.SignPod(pod, resourcehelper.PodRequests(pod, p.requests))
}
