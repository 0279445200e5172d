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
// the request consumes of each capacity. Its work per pod is bounded by
// the nodes kube-scheduler searches, not by the cluster.
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
	allocated  *devicecount.Allocated

	mu sync.RWMutex
	// matches caches, per ResourceSlice, which of its devices each CEL
	// expression selects.
	matches map[string]*sliceMatches
}

// maxCachedSelections bounds the selections cached per slice.
const maxCachedSelections = 256

// sliceMatches is one ResourceSlice version's selector results.
type sliceMatches struct {
	uid             types.UID
	resourceVersion string
	// byExpr holds, per expression, whether it selects each device, and
	// byKey whether all of an alternative's expressions do.
	byExpr map[string][]bool
	byKey  map[unique.Handle[string]][]bool
	// idle holds, per capacity request (alternative.capKey), what the
	// devices offer it when nothing holds them.
	idle map[unique.Handle[string]]*idleFit
	// ids are the devices' IDs.
	ids []structured.DeviceID
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
	}
	if h != nil {
		p.dra = h.SharedDRAManager()
	}
	if p.dra == nil {
		p.enabled = false
	} else {
		p.allocated = devicecount.NewAllocated(p.dra, p.consumable)
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
	// local holds each node's node-local slices, newest generation.
	local     map[string][]*resourceapi.ResourceSlice
	allocated *devicecount.Snapshot
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
	reqs, why := p.requirements(pod)
	if len(reqs) == 0 {
		if why != "" {
			logger.V(5).Info("Not checking the pod's claims", "pod", klog.KObj(pod), "reason", why)
		}
		return nil, fwk.NewStatus(fwk.Skip)
	}
	c, err := p.prepare(ctx, cs, reqs)
	if err != nil {
		// The DynamicResources plugin reads the same state and reports.
		logger.V(4).Info("Not checking the pod's claims", "pod", klog.KObj(pod), "err", err)
		return nil, fwk.NewStatus(fwk.Skip)
	}
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

// requirements lists what the pod's unallocated claims need. It returns
// nothing, and why, when a claim or class cannot be read.
func (p *Plugin) requirements(pod *corev1.Pod) ([]requirement, string) {
	var out []requirement
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, err.Error()
		}
		if name == nil {
			continue
		}
		claim, err := p.dra.ResourceClaims().Get(pod.Namespace, *name)
		if err != nil {
			return nil, err.Error()
		}
		if claim.Status.Allocation != nil {
			continue
		}
		for _, r := range claim.Spec.Devices.Requests {
			req, err := p.requirement(claim.Name, r)
			if err != nil {
				return nil, err.Error()
			}
			if len(req.alts) > 0 {
				out = append(out, req)
			}
		}
	}
	return out, ""
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
		req.alts = append(req.alts, alt)
	}
	return req, nil
}

// prepare reads what Filter needs: the slices by node, the allocated
// state, and which requirements devices outside node-local slices could
// serve (those are not checked).
func (p *Plugin) prepare(ctx context.Context, cs fwk.CycleState, reqs []requirement) (*check, error) {
	list, err := p.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	allocated, err := devicecount.GatherAllocated(cs, p.allocated)
	if err != nil {
		return nil, err
	}
	newest := devicecount.NewestGenerations(list)
	c := &check{
		reqs:      reqs,
		offset:    make([]int, len(reqs)+1),
		unchecked: make([]bool, len(reqs)),
		local:     make(map[string][]*resourceapi.ResourceSlice, len(list)),
		allocated: allocated,
	}
	for i, r := range reqs {
		c.offset[i+1] = c.offset[i] + len(r.alts)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	current := 0
	for _, slice := range list {
		if newest.Stale(slice) {
			continue
		}
		current++
		if node := ptr.Deref(slice.Spec.NodeName, ""); node != "" && !ptr.Deref(slice.Spec.PerDeviceNodeSelection, false) {
			c.local[node] = append(c.local[node], slice)
			continue
		}
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
	if len(p.matches) > 2*current+16 {
		seen := make(map[string]bool, current)
		for _, slice := range list {
			seen[slice.Name] = true
		}
		for name := range p.matches {
			if !seen[name] {
				delete(p.matches, name)
			}
		}
	}
	return c, nil
}

// verdict counts each alternative's free matching devices on a node and
// returns why the node cannot satisfy some requirement, "" if it can.
func (p *Plugin) verdict(ctx context.Context, c *check, node string) string {
	// Filter runs once per node searched: a pod's alternatives usually
	// fit in these buffers, which stay on the stack.
	var countBuf [8]int64
	var pickBuf [8]pick
	var doneBuf [8]bool
	n := c.offset[len(c.reqs)]
	counts, picks, done := countBuf[:0], pickBuf[:0], doneBuf[:0]
	if n > len(countBuf) {
		counts, picks = make([]int64, 0, n), make([]pick, 0, n)
	}
	if len(c.reqs) > len(doneBuf) {
		done = make([]bool, 0, len(c.reqs))
	}
	counts, picks, done = counts[:n], picks[:n], done[:len(c.reqs)]
	// A request is done once one of its alternatives has the devices it
	// asks for; the node passes when every checked request is done, and
	// the rest of its devices need not be looked at.
	remaining := 0
	for i := range c.reqs {
		done[i] = c.unchecked[i]
		if !done[i] {
			remaining++
		}
	}
	for _, slice := range c.local[node] {
		if remaining == 0 {
			return ""
		}
		ids := p.picks(ctx, c, slice, picks)
		for i, r := range c.reqs {
			if done[i] {
				continue
			}
		alternatives:
			for j, alt := range r.alts {
				k := c.offset[i] + j
				sel, idle := picks[k].sel, picks[k].idle
				for d := range slice.Spec.Devices {
					if sel[d] && idle.fits[d] && p.free(c.allocated, ids[d], &slice.Spec.Devices[d], idle.needs[d]) {
						counts[k]++
						if counts[k] >= alt.count {
							done[i] = true
							remaining--
							break alternatives
						}
					}
				}
			}
		}
	}
	// The requests not done have every alternative counted in full.
	for i, r := range c.reqs {
		if done[i] {
			continue
		}
		var have int64
		for j := range r.alts {
			have = max(have, counts[c.offset[i]+j])
		}
		return reason(r, have)
	}
	return ""
}

// pick is what a slice offers one alternative: which devices its
// selectors select, and which could take its capacity requests.
type pick struct {
	sel  []bool
	idle *idleFit
}

// picks fills in what the slice offers each alternative of the check,
// from the cache, and returns the slice's device IDs. Filter runs on
// many nodes at once: a read lock serves the cached case, and only a
// slice or alternative not seen before takes the write lock.
func (p *Plugin) picks(ctx context.Context, c *check, slice *resourceapi.ResourceSlice, picks []pick) []structured.DeviceID {
	p.mu.RLock()
	if m := p.matches[slice.Name]; m != nil && m.current(slice) {
		cached := true
		for i, r := range c.reqs {
			for j, alt := range r.alts {
				sel, ok := m.byKey[alt.key]
				idle, ok2 := m.idle[alt.capKey]
				if !ok || !ok2 {
					cached = false
					break
				}
				picks[c.offset[i]+j] = pick{sel, idle}
			}
		}
		if cached {
			p.mu.RUnlock()
			return m.ids
		}
	}
	p.mu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.sliceMatches(slice)
	for i, r := range c.reqs {
		for j, alt := range r.alts {
			picks[c.offset[i]+j] = pick{p.selection(ctx, m, slice, alt), p.idleFits(m, slice, alt)}
		}
	}
	return m.ids
}

func reason(r requirement, have int64) string {
	if len(r.alts) == 1 {
		return fmt.Sprintf("claim %s, request %s: %d free matching devices on the node, needs %d", r.claim, r.request, have, r.alts[0].count)
	}
	return fmt.Sprintf("claim %s, request %s: no subrequest finds enough free matching devices on the node (at most %d)", r.claim, r.request, have)
}

// sliceMatches returns the cache of a slice version. Callers hold p.mu.
func (p *Plugin) sliceMatches(slice *resourceapi.ResourceSlice) *sliceMatches {
	m := p.matches[slice.Name]
	if m == nil || !m.current(slice) {
		m = &sliceMatches{uid: slice.UID, resourceVersion: slice.ResourceVersion, byExpr: map[string][]bool{}, byKey: map[unique.Handle[string]][]bool{}, idle: map[unique.Handle[string]]*idleFit{}}
		m.ids = make([]structured.DeviceID, len(slice.Spec.Devices))
		for i := range slice.Spec.Devices {
			m.ids[i] = structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, slice.Spec.Devices[i].Name)
		}
		p.matches[slice.Name] = m
	}
	return m
}

// current tells whether the cache is of this version of the slice. A
// slice without a resourceVersion (a test's) is never cached.
func (m *sliceMatches) current(slice *resourceapi.ResourceSlice) bool {
	return m.uid == slice.UID && m.resourceVersion == slice.ResourceVersion && slice.ResourceVersion != ""
}

// selection tells, per device of the slice, whether all of the
// alternative's expressions select it. A selector that does not compile
// or fails on the device is taken to select it: the allocator reports
// such errors, not this plugin. Callers hold p.mu.
func (p *Plugin) selection(ctx context.Context, m *sliceMatches, slice *resourceapi.ResourceSlice, alt alternative) []bool {
	if sel, ok := m.byKey[alt.key]; ok {
		return sel
	}
	sel := make([]bool, len(slice.Spec.Devices))
	for i := range sel {
		sel[i] = true
	}
	for _, e := range alt.exprs {
		res, ok := m.byExpr[e]
		if !ok {
			res = make([]bool, len(slice.Spec.Devices))
			compiled := p.cel.GetOrCompile(e)
			for i := range slice.Spec.Devices {
				dev := &slice.Spec.Devices[i]
				if compiled.Error != nil {
					res[i] = true
					continue
				}
				match, _, err := compiled.DeviceMatches(ctx, cel.Device{Driver: slice.Spec.Driver, AllowMultipleAllocations: dev.AllowMultipleAllocations, Attributes: dev.Attributes, Capacity: dev.Capacity})
				res[i] = match || err != nil
			}
			m.byExpr[e] = res
		}
		for i := range sel {
			sel[i] = sel[i] && res[i]
		}
	}
	if len(m.byKey) >= maxCachedSelections {
		// Claims with ever new selectors: start over rather than grow.
		m.byKey, m.byExpr = map[unique.Handle[string]][]bool{}, map[string][]bool{}
	}
	m.byKey[alt.key] = sel
	return sel
}

// idleFit is what a slice's devices offer an alternative when nothing
// holds them.
type idleFit struct {
	// fits tells, per device, whether it could take the alternative's
	// capacity requests.
	fits []bool
	// needs lists, per device that fits, the capacities the
	// alternative consumes of it (with consumable capacity on).
	needs [][]capacityNeed
}

// capacityNeed is what an alternative consumes of one capacity of a
// device, and the device's total, in milli-units.
type capacityNeed struct {
	name        resourceapi.QualifiedName
	need, total int64
}

// idleFits returns what the slice's devices offer the alternative when
// nothing holds them, worked out once per slice version. Callers hold
// p.mu.
func (p *Plugin) idleFits(m *sliceMatches, slice *resourceapi.ResourceSlice, alt alternative) *idleFit {
	if fit, ok := m.idle[alt.capKey]; ok {
		return fit
	}
	fit := &idleFit{fits: make([]bool, len(slice.Spec.Devices)), needs: make([][]capacityNeed, len(slice.Spec.Devices))}
	for d := range slice.Spec.Devices {
		fit.needs[d], fit.fits[d] = p.needs(&slice.Spec.Devices[d], alt)
	}
	if len(m.idle) >= maxCachedSelections {
		m.idle = map[unique.Handle[string]]*idleFit{}
	}
	m.idle[alt.capKey] = fit
	return fit
}

// needs works out what the alternative consumes of a device with
// consumable capacity on: every capacity the alternative asks for must
// be there, and the alternative consumes at least the amount asked
// (before rounding up to a valid value), else the capacity's default,
// else all of it, as the allocator counts it. fits is false where the
// device could not take that even when idle.
func (p *Plugin) needs(dev *resourceapi.Device, alt alternative) (needs []capacityNeed, fits bool) {
	if !p.consumable {
		return nil, true
	}
	for name := range alt.requests {
		if _, ok := dev.Capacity[name]; !ok {
			// The allocator skips a device without a requested capacity.
			return nil, false
		}
	}
	for name, c := range dev.Capacity {
		need, asked := alt.requests[name]
		switch {
		case asked:
			if c.RequestPolicy != nil && c.RequestPolicy.ValidRange != nil && c.RequestPolicy.ValidRange.Min != nil {
				need = max(need, c.RequestPolicy.ValidRange.Min.MilliValue())
			}
		case c.RequestPolicy != nil && c.RequestPolicy.Default != nil:
			need = c.RequestPolicy.Default.MilliValue()
		default:
			need = c.Value.MilliValue()
		}
		total := c.Value.MilliValue()
		if need > total {
			return nil, false
		}
		needs = append(needs, capacityNeed{name: name, need: need, total: total})
	}
	return needs, true
}

// free tells whether a device that fits the alternative when idle can
// take it now: a device used whole must not be allocated; a shared one
// must have room left for what the alternative consumes (needs).
func (p *Plugin) free(allocated *devicecount.Snapshot, id structured.DeviceID, dev *resourceapi.Device, needs []capacityNeed) bool {
	if !p.consumable || !ptr.Deref(dev.AllowMultipleAllocations, false) {
		return !allocated.AllocatedDevices.Has(id)
	}
	for _, n := range needs {
		if used, ok := allocated.ConsumedMilli(id, n.name); ok && used+n.need > n.total {
			return false
		}
	}
	return true
}
