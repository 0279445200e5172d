// Package devicefit is the StrataDeviceFit filter plugin: a cheap,
// conservative check of a pod's unallocated ResourceClaims against each
// node's free devices, run before the DynamicResources filter so that the
// structured allocator only runs on nodes where the claims can fit.
//
// Why: the allocator evaluates every CEL selector of a claim's requests
// and classes on every device of every node it is asked about, and a CEL
// evaluation builds maps of the device's attributes; on a node whose
// matching devices are all in use it evaluates all of them and still
// fails. At a thousand GPU nodes that is most of a DRA pod's scheduling
// time (see docs/scoring.md). This plugin evaluates each selector once
// per device per ResourceSlice version, caches the answer, and in Filter
// counts the node's matching devices that are free: not allocated, or,
// for a device that allows several allocations, with room left for what
// the request consumes of each capacity.
//
// Its work per pod is bounded by the nodes kube-scheduler searches, not
// by the cluster: an index fed by the informers' events
// (devicecount.Index) holds each node's slices and what claims hold of
// each device, and the plugin keeps per node and request shape the count
// of free devices, worked out again only when the node's slices or
// allocations change (count.go). PreFilter reads the pod's claims, the
// few slices that are not node-local, and the claims of pods it saw
// scheduled whose allocation the informer has not delivered yet
// (inflight.go); Filter reads one node's counts.
//
// It never rejects a node the allocator would accept: every condition it
// checks is necessary for an allocation, and whatever it cannot work out
// cheaply it does not check —
//   - requests with allocationMode All or adminAccess, and claims that are
//     allocated already, are not checked;
//   - several requests of a claim are checked one at a time (two requests
//     may each find a device, but not two different ones);
//   - device taints, shared counters (partitions), binding conditions,
//     constraints (matchAttribute) and the rounding of consumed capacity
//     up to a valid value are ignored;
//   - a request that devices outside node-local slices (nodeSelector,
//     allNodes, per-device node selection) could serve is not checked;
//   - a pod whose claims or classes cannot be read is not checked; the
//     DynamicResources plugin reports those.
//
// A rejected node is Unschedulable, not UnschedulableAndUnresolvable, so
// preemption still considers it; when preemption removes a pod with
// claims from a node, the node is let through (RemovePod) and the
// allocator decides.
package devicefit

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
)

// Name of the plugin in the scheduler configuration.
const Name = "StrataDeviceFit"

// Plugin is the StrataDeviceFit plugin. It has no args.
type Plugin struct {
	dra        fwk.SharedDRAManager
	enabled    bool
	consumable bool
	cel        *cel.Cache
	index      *devicecount.Index

	mu sync.RWMutex
	// matches caches, per ResourceSlice, which of its devices each CEL
	// expression selects.
	matches map[string]*sliceMatches

	// counts holds each node's free-device counts (*nodeCounts), by node
	// name.
	counts sync.Map

	inFlight inFlight
}

var (
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
	_ fwk.SignPlugin        = (*Plugin)(nil)
)

// New creates the plugin. It takes no args.
func New(_ context.Context, obj runtime.Object, h fwk.Handle, fts feature.Features) (fwk.Plugin, error) {
	if obj != nil {
		if u, ok := obj.(*runtime.Unknown); !ok || len(u.Raw) > 0 && string(u.Raw) != "{}" && string(u.Raw) != "null" {
			return nil, fmt.Errorf("%s takes no args, got %T", Name, obj)
		}
	}
	p := &Plugin{
		enabled:    fts.EnableDynamicResourceAllocation,
		consumable: fts.EnableDRAConsumableCapacity,
		cel:        cel.NewCache(64, cel.Features{EnableConsumableCapacity: fts.EnableDRAConsumableCapacity}),
		matches:    map[string]*sliceMatches{},
		index:      devicecount.NewIndex(fts.EnableDRAConsumableCapacity),
		inFlight:   inFlight{claims: map[types.UID]watched{}},
	}
	if h != nil {
		p.dra = h.SharedDRAManager()
	}
	if p.dra == nil || !p.enabled {
		p.enabled = false
		return p, nil
	}
	factory := h.SharedInformerFactory()
	if factory == nil {
		return nil, fmt.Errorf("%s needs the scheduler's informer factory", Name)
	}
	sliceInformer := factory.Resource().V1().ResourceSlices().Informer()
	if err := p.index.Watch(sliceInformer, factory.Resource().V1().ResourceClaims().Informer()); err != nil {
		return nil, fmt.Errorf("%s: watch slices and claims: %w", Name, err)
	}
	if _, err := sliceInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: p.forgetSlice}); err != nil {
		return nil, fmt.Errorf("%s: watch slices: %w", Name, err)
	}
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: p.forgetNode}); err != nil {
		return nil, fmt.Errorf("%s: watch nodes: %w", Name, err)
	}
	return p, nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// SignPod implements fwk.SignPlugin: the plugin adds nothing to a pod's
// signature. Pods with claims are not batched anyway (DynamicResources
// refuses to sign them), and the plugin skips pods without.
func (p *Plugin) SignPod(context.Context, *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// EventsToRegister implements fwk.EnqueueExtensions: a node the plugin
// rejected can take the pod once devices are freed (claims change or go
// away), added (slices) or selected differently (classes).
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	if !p.enabled {
		return nil, nil
	}
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceClaim, ActionType: fwk.Add | fwk.Update | fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update}},
		{Event: fwk.ClusterEvent{Resource: fwk.DeviceClass, ActionType: fwk.Add | fwk.Update}},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}},
	}, nil
}

const stateKey fwk.StateKey = Name

// state is one cycle's check: what the pod's claims need, the devices
// on each node, and the nodes preemption has since let through.
type state struct {
	*check
	reopened sets.Set[string]
}

// check is what Filter counts a node's devices against; read-only once
// PreFilter is done.
type check struct {
	reqs []requirement
	// offset[i] is where requirement i's alternatives start in a node's
	// counts.
	offset []int
	// unchecked marks the requirements that devices outside node-local
	// slices could serve: those are not checked.
	unchecked []bool
	// flying holds the allocations in flight or assumed that the index
	// does not hold yet, by device, and the nodes of their pools.
	flying      map[structured.DeviceID][]devicecount.Holder
	flyingNodes sets.Set[string]
}

// Clone implements fwk.StateData; preemption clones the state per node.
func (s *state) Clone() fwk.StateData {
	return &state{check: s.check, reopened: s.reopened.Clone()}
}

// PreFilter works out which nodes cannot host the pod's unallocated
// claims. It skips pods without such claims, and pods it cannot check.
func (p *Plugin) PreFilter(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !p.enabled || len(pod.Spec.ResourceClaims) == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	logger := klog.FromContext(ctx)
	if !p.index.Synced() {
		logger.V(4).Info("Not checking the pod's claims: the device index is not synced yet", "pod", klog.KObj(pod))
		return nil, fwk.NewStatus(fwk.Skip)
	}
	flying, flyingNodes := p.inFlight.overlay(p.dra, p.index)
	reqs, unallocated, why := p.requirements(pod)
	// Watched from now on: the claims this pod may have allocated in
	// flight by the time the next pod is checked.
	p.inFlight.watch(unallocated)
	if len(reqs) == 0 {
		if why != "" {
			logger.V(5).Info("Not checking the pod's claims", "pod", klog.KObj(pod), "reason", why)
		}
		return nil, fwk.NewStatus(fwk.Skip)
	}
	c := p.prepare(ctx, reqs)
	c.flying, c.flyingNodes = flying, flyingNodes
	cs.Write(stateKey, &state{check: c, reopened: sets.New[string]()})
	return nil, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// AddPod implements fwk.PreFilterExtensions. A pod added in a
// simulation (a nominated pod) would only take devices; not counting it
// keeps the plugin conservative.
func (p *Plugin) AddPod(context.Context, fwk.CycleState, *corev1.Pod, fwk.PodInfo, fwk.NodeInfo) *fwk.Status {
	return nil
}

// RemovePod implements fwk.PreFilterExtensions. Preemption removes
// victims before it filters a node again; a victim with claims may free
// devices, so the node is no longer rejected and the allocator decides.
func (p *Plugin) RemovePod(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, victim fwk.PodInfo, ni fwk.NodeInfo) *fwk.Status {
	if len(victim.GetPod().Spec.ResourceClaims) == 0 {
		return nil
	}
	s, err := readState(cs)
	if err != nil {
		return nil // PreFilter skipped the pod
	}
	s.reopened.Insert(ni.Node().Name)
	return nil
}

// Filter rejects a node whose free devices cannot satisfy the pod's
// claims.
func (p *Plugin) Filter(ctx context.Context, cs fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	s, err := readState(cs)
	if err != nil {
		return nil
	}
	name := ni.Node().Name
	if s.reopened.Has(name) {
		return nil
	}
	if reason := p.verdict(ctx, s.check, name); reason != "" {
		return fwk.NewStatus(fwk.Unschedulable, reason)
	}
	return nil
}

func readState(cs fwk.CycleState) (*state, error) {
	d, err := cs.Read(stateKey)
	if err != nil {
		return nil, err
	}
	s, ok := d.(*state)
	if !ok {
		return nil, fmt.Errorf("%s: cycle state holds %T", Name, d)
	}
	return s, nil
}

// alternative is one way to satisfy a request: the request itself, or one
// of its firstAvailable subrequests.
type alternative struct {
	// exprs are the class's selectors, then the request's; key joins them
	// (interned: the caches are looked up by it for every node).
	exprs []string
	key   unique.Handle[string]
	count int64
	// shape names what the alternative's count on a node depends on:
	// its selectors and capacity requests.
	shape unique.Handle[string]
	// requests are the capacities the alternative asks for, in
	// milli-units; capKey names them.
	requests map[resourceapi.QualifiedName]int64
	capKey   unique.Handle[string]
}

// requirement is one request of an unallocated claim: some alternative
// must find count free devices on the node.
type requirement struct {
	claim, request string
	alts           []alternative
}

// requirements lists what the pod's unallocated claims need, and those
// claims. It returns no requirements, and why, when a claim or class
// cannot be read.
func (p *Plugin) requirements(pod *corev1.Pod) ([]requirement, []*resourceapi.ResourceClaim, string) {
	var out []requirement
	var unallocated []*resourceapi.ResourceClaim
	why := ""
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, unallocated, err.Error()
		}
		if name == nil {
			continue
		}
		claim, err := p.dra.ResourceClaims().Get(pod.Namespace, *name)
		if err != nil {
			return nil, unallocated, err.Error()
		}
		if claim.Status.Allocation != nil {
			continue
		}
		unallocated = append(unallocated, claim)
		for _, r := range claim.Spec.Devices.Requests {
			req, err := p.requirement(claim.Name, r)
			if err != nil && why == "" {
				out, why = nil, err.Error()
			}
			if why == "" && len(req.alts) > 0 {
				out = append(out, req)
			}
		}
	}
	return out, unallocated, why
}

// requirement is what one request needs; no alternatives when the
// plugin does not check the request.
func (p *Plugin) requirement(claim string, r resourceapi.DeviceRequest) (requirement, error) {
	req := requirement{claim: claim, request: r.Name}
	subs := r.FirstAvailable
	if e := r.Exactly; e != nil {
		if ptr.Deref(e.AdminAccess, false) {
			return req, nil
		}
		subs = []resourceapi.DeviceSubRequest{{
			DeviceClassName: e.DeviceClassName, Selectors: e.Selectors,
			AllocationMode: e.AllocationMode, Count: e.Count, Capacity: e.Capacity,
		}}
	}
	for _, sub := range subs {
		if sub.AllocationMode != "" && sub.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
			// All the matching devices: not checked.
			return requirement{}, nil
		}
		class, err := p.dra.DeviceClasses().Get(sub.DeviceClassName)
		if err != nil {
			return requirement{}, err
		}
		alt := alternative{count: max(sub.Count, 1)}
		for _, s := range class.Spec.Selectors {
			if s.CEL != nil {
				alt.exprs = append(alt.exprs, s.CEL.Expression)
			}
		}
		for _, s := range sub.Selectors {
			if s.CEL != nil {
				alt.exprs = append(alt.exprs, s.CEL.Expression)
			}
		}
		alt.key = unique.Make(strings.Join(alt.exprs, "\x00"))
		if sub.Capacity != nil && len(sub.Capacity.Requests) > 0 {
			alt.requests = map[resourceapi.QualifiedName]int64{}
			var parts []string
			for n, q := range sub.Capacity.Requests {
				alt.requests[n] = q.MilliValue()
				parts = append(parts, fmt.Sprintf("%s=%d", n, alt.requests[n]))
			}
			sort.Strings(parts)
			alt.capKey = unique.Make(strings.Join(parts, ","))
		} else {
			alt.capKey = unique.Make("")
		}
		alt.shape = unique.Make(alt.key.Value() + "\x01" + alt.capKey.Value())
		req.alts = append(req.alts, alt)
	}
	return req, nil
}

// prepare works out which requirements devices outside node-local
// slices could serve (those are not checked); only those few slices are
// read.
func (p *Plugin) prepare(ctx context.Context, reqs []requirement) *check {
	c := &check{
		reqs:      reqs,
		offset:    make([]int, len(reqs)+1),
		unchecked: make([]bool, len(reqs)),
	}
	for i, r := range reqs {
		c.offset[i+1] = c.offset[i] + len(r.alts)
	}
	view := p.index.Read()
	wide := view.Wide()
	view.Done()
	if len(wide) == 0 {
		return c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, slice := range wide {
		m := p.sliceMatches(slice)
		for i, r := range reqs {
			for _, alt := range r.alts {
				// Devices reachable from several nodes: not checked.
				if slices.Contains(p.selection(ctx, m, slice, alt), true) {
					c.unchecked[i] = true
				}
			}
		}
	}
	return c
}

func reason(r requirement, have int64) string {
	if len(r.alts) == 1 {
		return fmt.Sprintf("claim %s, request %s: %d free matching devices on the node, needs %d", r.claim, r.request, have, r.alts[0].count)
	}
	return fmt.Sprintf("claim %s, request %s: no subrequest finds enough free matching devices on the node (at most %d)", r.claim, r.request, have)
}
