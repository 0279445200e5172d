package gang

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// capacityEstimator works out how many more members of a gang each node
// can take: by CPU, memory and other resources, pod slots, taints and
// node affinity, and by DRA devices — the member's claims are allocated k
// times over on the node with the scheduler's own structured allocator,
// so a member asking for 8 GPUs needs 8 free matching devices and each
// simulated member consumes them.
//
// Identical nodes (same devices, same devices in use) give the same DRA
// answer, so it is computed once per such class: on a cluster of
// thousands of identical nodes, a handful of allocator runs.
type capacityEstimator struct {
	dra      fwk.SharedDRAManager
	celCache *cel.Cache
	features structured.Features
	// mu guards the slice view and the hashes it is built from.
	mu       sync.Mutex
	lastView *sliceView
	// sliceHashes caches the content hash of each live ResourceSlice
	// object.
	sliceHashes map[*resourceapi.ResourceSlice]sliceHash
}

type sliceHash struct {
	sum [32]byte
	// positions hashes each device of the slice by the slice's content
	// and the device's place in it, by device name: two identical nodes
	// whose drivers name devices after the node have the same devices in
	// use when the same places are in use.
	positions map[string]uint64
}

func newCapacityEstimator(dra fwk.SharedDRAManager, fts feature.Features) *capacityEstimator {
	return &capacityEstimator{
		dra:         dra,
		celCache:    cel.NewCache(32, cel.Features{EnableConsumableCapacity: fts.EnableDRAConsumableCapacity}),
		features:    dynamicresources.AllocatorFeatures(fts),
		sliceHashes: map[*resourceapi.ResourceSlice]sliceHash{},
	}
}

// limit explains what stops a node from taking more members.
type limit struct {
	count  int
	reason string
}

// adjustment simulates evictions: resources and pod slots handed back per
// node, and the allocated devices left once the victims' claims are gone.
type adjustment struct {
	freed     map[string]corev1.ResourceList
	freedPods map[string]int
	allocated *structured.AllocatedState
}

// capacities returns, for every node, how many of up to want members fit,
// and a summary of why nodes fell short. adj, if set, simulates evictions
// or room already planned for other members; probe, if set, bounds the
// count by the scheduler's Filter plugins (on nodes that adj does not
// free room on: a victim's pods still sit in the snapshot).
//
// Extended resources that a DeviceClass maps (its extendedResourceName,
// such as nvidia.com/gpu) count as device requests on nodes whose
// allocatable lacks them, as the scheduler's DRA plugin treats them there;
// on nodes that have them (a device plugin) they count as resources.
func (e *capacityEstimator) capacities(ctx context.Context, pod *corev1.Pod, want int, nodes []fwk.NodeInfo, adj *adjustment, probe *filterProbe) (map[string]int, string, error) {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	claims, err := e.memberClaims(pod)
	if err != nil {
		return nil, "", err
	}
	pinned, err := e.allocatedOn(pod)
	if err != nil {
		return nil, "", err
	}
	var allocated *structured.AllocatedState
	if adj != nil {
		allocated = adj.allocated
	}
	md, err := e.memberDevices(ctx, pod, requests, claims, want, allocated)
	if err != nil {
		return nil, "", err
	}
	out := make(map[string]int, len(nodes))
	reasons := map[shortfall]int{}
	for _, ni := range nodes {
		reqs, d := md.forNode(ni)
		l := nodeLimit(ctx, pod, reqs, affinity, ni, want, adj)
		if l.count > 0 && !pinned.Match(ni.Node()) {
			l = limit{reason: "a claim of the member is allocated on other nodes"}
		}
		if d != nil && l.count > 0 {
			n, err := d.forNode(ctx, ni.Node(), l.count)
			if err != nil {
				return nil, "", err
			}
			if n < l.count {
				l = limit{count: n, reason: "DRA devices"}
			}
		}
		// The Filter plugins last, on the fewest members: each member they
		// pass costs a Filter run and a copy added to the node.
		if probe != nil && l.count > 0 && (adj == nil || adj.freedPods[ni.Node().Name] <= 0) {
			if pl := probe.limit(ctx, ni, l.count); pl.count < l.count {
				l = pl
			}
		}
		out[ni.Node().Name] = l.count
		if l.count < want && l.reason != "" {
			reasons[shortfall{reason: l.reason, fit: l.count}]++
		}
	}
	if md.ext != nil {
		claims = append(claims, md.ext)
		requests = md.withoutExt
	}
	return out, summarize(reasons, requests, claims), nil
}

// memberDevices is how a member's devices are counted on each node: its
// claims, and its extended resources as a claim for the classes that map
// them on nodes without those resources (with the requests left without
// them there).
type memberDevices struct {
	requests, withoutExt corev1.ResourceList
	ext                  *resourceapi.ResourceClaim
	extNames             []corev1.ResourceName
	dra, draExt          *draCapacity
}

func (e *capacityEstimator) memberDevices(ctx context.Context, pod *corev1.Pod, requests corev1.ResourceList, claims []*resourceapi.ResourceClaim, want int, allocated *structured.AllocatedState) (*memberDevices, error) {
	md := &memberDevices{requests: requests}
	md.ext, md.extNames = e.extendedAsDevices(pod, requests)
	if len(claims) > 0 || md.ext != nil {
		base, err := e.newDRACapacity(ctx, claims, want, allocated)
		if err != nil {
			return nil, err
		}
		if len(claims) > 0 {
			md.dra = base
		}
		if md.ext != nil {
			md.draExt = base.withClaims(append(slices.Clone(claims), md.ext))
		}
	}
	md.withoutExt = maps.Clone(requests)
	for _, n := range md.extNames {
		delete(md.withoutExt, n)
	}
	return md, nil
}

// forNode returns the requests and the device counter that apply on a
// node (nil: the member needs no devices there).
func (md *memberDevices) forNode(ni fwk.NodeInfo) (corev1.ResourceList, *draCapacity) {
	if md.draExt != nil && !hasAnyScalar(ni, md.extNames) {
		return md.withoutExt, md.draExt
	}
	return md.requests, md.dra
}

// consume returns a copy of adj in which count members of pod's shape
// hold room on each node of counts: their requests, their pod slots, and
// the devices of copies of their claims, allocated as the scheduler
// would. The next shape of a heterogeneous gang is sized with it.
func (e *capacityEstimator) consume(ctx context.Context, pod *corev1.Pod, counts map[string]int, nodes map[string]fwk.NodeInfo, adj *adjustment) (*adjustment, error) {
	out := &adjustment{freed: map[string]corev1.ResourceList{}, freedPods: map[string]int{}}
	var base *structured.AllocatedState
	if adj != nil {
		for n, l := range adj.freed {
			out.freed[n] = l.DeepCopy()
		}
		maps.Copy(out.freedPods, adj.freedPods)
		base = adj.allocated
	}
	if base == nil {
		var err error
		if base, err = e.dra.ResourceClaims().GatherAllocatedState(); err != nil {
			return nil, fmt.Errorf("gather allocated devices: %w", err)
		}
	}
	out.allocated = cloneAllocated(base)
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	claims, err := e.memberClaims(pod)
	if err != nil {
		return nil, err
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	md, err := e.memberDevices(ctx, pod, requests, claims, most, out.allocated)
	if err != nil {
		return nil, err
	}
	for _, node := range slices.Sorted(maps.Keys(counts)) {
		c, ni := counts[node], nodes[node]
		if c <= 0 || ni == nil {
			continue
		}
		reqs, d := md.forNode(ni)
		sum := out.freed[node]
		if sum == nil {
			sum = corev1.ResourceList{}
		}
		for name, q := range reqs {
			cur := sum[name]
			if name == corev1.ResourceCPU {
				cur.Sub(*resource.NewMilliQuantity(q.MilliValue()*int64(c), resource.DecimalSI))
			} else {
				cur.Sub(*resource.NewQuantity(q.Value()*int64(c), resource.BinarySI))
			}
			sum[name] = cur
		}
		out.freed[node] = sum
		out.freedPods[node] -= c
		if d == nil {
			continue
		}
		results, err := d.allocate(ctx, ni.Node(), c)
		if err != nil {
			return nil, err
		}
		for _, r := range results {
			applyAllocation(out.allocated, r.Devices.Results, true)
		}
	}
	return out, nil
}

// cloneAllocated copies an allocated state so that a simulation can
// change it.
func cloneAllocated(s *structured.AllocatedState) *structured.AllocatedState {
	return &structured.AllocatedState{
		AllocatedDevices:         s.AllocatedDevices.Clone(),
		AllocatedSharedDeviceIDs: s.AllocatedSharedDeviceIDs.Clone(),
		AggregatedCapacity:       s.AggregatedCapacity.Clone(),
	}
}

// applyAllocation marks the devices of allocation results as in use
// (add) or free again (a simulated eviction).
func applyAllocation(s *structured.AllocatedState, results []resourceapi.DeviceRequestAllocationResult, add bool) {
	for _, r := range results {
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		switch {
		case r.ShareID == nil && add:
			s.AllocatedDevices.Insert(id)
		case r.ShareID == nil:
			s.AllocatedDevices.Delete(id)
		case add:
			s.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if len(r.ConsumedCapacity) > 0 {
				s.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
		default:
			s.AllocatedSharedDeviceIDs.Delete(structured.MakeSharedDeviceID(id, r.ShareID))
			if len(r.ConsumedCapacity) > 0 {
				s.AggregatedCapacity.Remove(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
		}
	}
}

// extendedAsDevices turns the member's extended resources that a
// DeviceClass maps into one claim for devices of those classes, and
// returns the names it covered.
func (e *capacityEstimator) extendedAsDevices(pod *corev1.Pod, requests corev1.ResourceList) (*resourceapi.ResourceClaim, []corev1.ResourceName) {
	resolver := e.dra.DeviceClassResolver()
	if resolver == nil {
		return nil, nil
	}
	var names []corev1.ResourceName
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name + "-extended-resources", UID: pod.UID + "-extended-resources"}}
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		q := requests[name]
		if !v1helper.IsExtendedResourceName(name) || q.Value() <= 0 {
			continue
		}
		class := resolver.GetDeviceClass(name)
		if class == nil {
			continue
		}
		names = append(names, name)
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: fmt.Sprintf("extended-%d", len(names)),
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: q.Value(),
			},
		})
	}
	if len(names) == 0 {
		return nil, nil
	}
	return claim, names
}

// hasAnyScalar reports whether a node's allocatable has one of the
// resources, which a device plugin then serves.
func hasAnyScalar(ni fwk.NodeInfo, names []corev1.ResourceName) bool {
	scalars := ni.GetAllocatable().GetScalarResources()
	for _, n := range names {
		if scalars[n] > 0 {
			return true
		}
	}
	return false
}

// nodeLimit counts members by everything but DRA.
func nodeLimit(ctx context.Context, pod *corev1.Pod, requests corev1.ResourceList, affinity nodeaffinity.RequiredNodeAffinity, ni fwk.NodeInfo, want int, adj *adjustment) limit {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable {
		return limit{reason: "cordoned"}
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.FromContext(ctx), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, true); untolerated {
		return limit{reason: "untolerated taints"}
	}
	if ok, _ := affinity.Match(node); !ok {
		return limit{reason: "node selector or affinity"}
	}
	n := want
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	var freed corev1.ResourceList
	freedPods := 0
	if adj != nil {
		freed, freedPods = adj.freed[node.Name], adj.freedPods[node.Name]
	}
	if free := alloc.GetAllowedPodNumber() - len(ni.GetPods()) + freedPods; free < n {
		n = max(free, 0)
		if n < want {
			return limit{count: n, reason: "pod slots"}
		}
	}
	reason := ""
	for name, q := range requests {
		var have, need int64
		switch name {
		case corev1.ResourceCPU:
			have, need = alloc.GetMilliCPU()-used.GetMilliCPU(), q.MilliValue()
		case corev1.ResourceMemory:
			have, need = alloc.GetMemory()-used.GetMemory(), q.Value()
		case corev1.ResourceEphemeralStorage:
			have, need = alloc.GetEphemeralStorage()-used.GetEphemeralStorage(), q.Value()
		default:
			have, need = alloc.GetScalarResources()[name]-used.GetScalarResources()[name], q.Value()
		}
		if need <= 0 {
			continue
		}
		if q, ok := freed[name]; ok {
			if name == corev1.ResourceCPU {
				have += q.MilliValue()
			} else {
				have += q.Value()
			}
		}
		if fit := int(max(have, 0) / need); fit < n {
			n, reason = fit, string(name)
		}
	}
	return limit{count: n, reason: reason}
}

// shortfall is why nodes take only fit members (fewer than wanted).
type shortfall struct {
	reason string
	fit    int
}

// summarize tells a user what a member needs and what limits the nodes
// that cannot take all of them: "no room for one member on 3 nodes (cpu)",
// "4 nodes take at most 1 member (InterPodAffinity: ...)".
func summarize(reasons map[shortfall]int, requests corev1.ResourceList, claims []*resourceapi.ResourceClaim) string {
	msg := "each member needs " + memberNeeds(requests, claims)
	if len(reasons) == 0 {
		return msg
	}
	keys := slices.Collect(maps.Keys(reasons))
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if (a.fit == 0) != (b.fit == 0) {
			return a.fit == 0
		}
		if reasons[a] != reasons[b] {
			return reasons[a] > reasons[b]
		}
		if a.fit != b.fit {
			return a.fit > b.fit
		}
		return a.reason < b.reason
	})
	var none, some []string
	for _, k := range keys {
		if k.fit == 0 {
			none = append(none, fmt.Sprintf("%s (%s)", plural(reasons[k], "node"), k.reason))
		} else if len(some) < 3 {
			verb := "take"
			if reasons[k] == 1 {
				verb = "takes"
			}
			some = append(some, fmt.Sprintf("%s %s at most %s (%s)", plural(reasons[k], "node"), verb, plural(k.fit, "member"), k.reason))
		}
	}
	if len(none) > 0 {
		msg += "; no room for one member on " + strings.Join(none, ", ")
	}
	if len(some) > 0 {
		msg += "; " + strings.Join(some, ", ")
	}
	return msg
}

// memberNeeds renders a member's requests: "8×nvidia-gpu.strata.sh, cpu 16".
func memberNeeds(requests corev1.ResourceList, claims []*resourceapi.ResourceClaim) string {
	var parts []string
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			switch {
			case r.Exactly != nil:
				parts = append(parts, fmt.Sprintf("%d×%s", max(r.Exactly.Count, 1), r.Exactly.DeviceClassName))
			case len(r.FirstAvailable) > 0:
				parts = append(parts, fmt.Sprintf("%d×%s", max(r.FirstAvailable[0].Count, 1), r.FirstAvailable[0].DeviceClassName))
			}
		}
	}
	names := make([]string, 0, len(requests))
	for n := range requests {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		q := requests[corev1.ResourceName(n)]
		parts = append(parts, n+" "+q.String())
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// claimPendingError: a member's ResourceClaim, generated from a template,
// is not created yet.
type claimPendingError struct{ claim string }

func (e *claimPendingError) Error() string {
	return fmt.Sprintf("waiting for the ResourceClaim of %q to be created", e.claim)
}

// memberClaims returns the pod's claims that still need an allocation.
// A claim not created yet is an error: the pod is retried when it is.
func (e *capacityEstimator) memberClaims(pod *corev1.Pod) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for _, pc := range pod.Spec.ResourceClaims {
		name := ""
		if pc.ResourceClaimName != nil {
			name = *pc.ResourceClaimName
		} else {
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
			if name == "" {
				return nil, &claimPendingError{claim: pc.Name}
			}
		}
		c, err := e.dra.ResourceClaims().Get(pod.Namespace, name)
		if err != nil {
			return nil, fmt.Errorf("ResourceClaim %s/%s: %w", pod.Namespace, name, err)
		}
		if c.Status.Allocation == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// pinnedTo is where a member's already allocated claims can be used.
type pinnedTo []*nodeaffinity.NodeSelector

// Match reports whether every allocated claim can be used on the node.
func (p pinnedTo) Match(node *corev1.Node) bool {
	for _, s := range p {
		if !s.Match(node) {
			return false
		}
	}
	return true
}

// allocatedOn returns the node selectors of the member's claims that are
// allocated already (a member retried after its bind failed, a claim
// shared with a running pod): the member can only go where they are.
func (e *capacityEstimator) allocatedOn(pod *corev1.Pod) (pinnedTo, error) {
	var out pinnedTo
	for _, c := range e.allocatedClaims(pod) {
		if c.claim.Status.Allocation.NodeSelector == nil {
			continue
		}
		sel, err := nodeaffinity.NewNodeSelector(c.claim.Status.Allocation.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("ResourceClaim %s/%s: allocation node selector: %w", pod.Namespace, c.claim.Name, err)
		}
		out = append(out, sel)
	}
	return out, nil
}

// allocationKey names the member's claims that are allocated already and
// where each can be used; "" when none is.
func (e *capacityEstimator) allocationKey(pod *corev1.Pod) string {
	var b strings.Builder
	for _, c := range e.allocatedClaims(pod) {
		raw, _ := json.Marshal(c.claim.Status.Allocation.NodeSelector) // plain API type: cannot fail
		fmt.Fprintf(&b, "%s=%s;", c.name, raw)
	}
	return b.String()
}

// podClaim is one of a pod's claims, by its name in the pod.
type podClaim struct {
	name  string
	claim *resourceapi.ResourceClaim
}

// allocatedClaims returns the member's claims that hold an allocation,
// in the pod's order. A claim that cannot be read is left out: the
// member's plan fails on it elsewhere (memberClaims).
func (e *capacityEstimator) allocatedClaims(pod *corev1.Pod) []podClaim {
	var out []podClaim
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		name, _, err := resourceclaim.Name(pod, pc)
		if err != nil || name == nil {
			continue
		}
		c, err := e.dra.ResourceClaims().Get(pod.Namespace, *name)
		if err != nil || c.Status.Allocation == nil {
			continue
		}
		out = append(out, podClaim{name: pc.Name, claim: c})
	}
	return out
}

// draCapacity answers "how many copies of these claims fit on a node".
type draCapacity struct {
	e *capacityEstimator
	// state is the allocated state copies are placed against; a copy's
	// devices are added while the next copy is placed and taken off
	// again before allocate returns.
	state  *structured.AllocatedState
	slices *nodeSlices
	claims []*resourceapi.ResourceClaim
	want   int
	// nodeKey maps node name to its class; memo maps class to the answer.
	nodeKey  map[string]classKey
	memo     map[classKey]int
	memoSafe bool
	copies   [][]*resourceapi.ResourceClaim
}

func (e *capacityEstimator) newDRACapacity(ctx context.Context, claims []*resourceapi.ResourceClaim, want int, allocated *structured.AllocatedState) (*draCapacity, error) {
	if allocated == nil {
		var err error
		if allocated, err = e.dra.ResourceClaims().GatherAllocatedState(); err != nil {
			return nil, fmt.Errorf("gather allocated devices: %w", err)
		}
	}
	slices, err := e.dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	v := e.view(slices)
	d := &draCapacity{e: e, state: allocated, slices: v.slices, claims: claims, want: want, memo: map[classKey]int{}, memoSafe: memoSafe(claims)}
	d.nodeKey = v.classes(allocated)
	return d, nil
}

// withClaims answers the same question for other claims over the same
// allocator and node classes, which are the expensive part.
func (d *draCapacity) withClaims(claims []*resourceapi.ResourceClaim) *draCapacity {
	return &draCapacity{e: d.e, state: d.state, slices: d.slices, claims: claims, want: d.want, nodeKey: d.nodeKey, memo: map[classKey]int{}, memoSafe: memoSafe(claims)}
}

// memoSafe is false when a selector can tell identical nodes apart (by a
// device UUID), so every node must be asked on its own.
func memoSafe(claims []*resourceapi.ResourceClaim) bool {
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			var sels []resourceapi.DeviceSelector
			if r.Exactly != nil {
				sels = r.Exactly.Selectors
			}
			for _, s := range r.FirstAvailable {
				sels = append(sels, s.Selectors...)
			}
			for _, s := range sels {
				if s.CEL != nil && (strings.Contains(strings.ToLower(s.CEL.Expression), "uuid") || strings.Contains(s.CEL.Expression, "device.name")) {
					return false
				}
			}
		}
	}
	return true
}

// forNode returns how many of up to limit member copies fit on the node.
func (d *draCapacity) forNode(ctx context.Context, node *corev1.Node, limit int) (int, error) {
	key, known := d.nodeKey[node.Name]
	if !known && len(d.slices.shared) == 0 {
		return 0, nil // the node has no devices of any driver
	}
	// Nodes without slices of their own share one class: what they can
	// use is the pools not bound to a node. Pools offered to some nodes
	// only (a node selector, per-device node selection) tell nodes of a
	// class apart, so then every node is asked on its own.
	memo := d.memoSafe && !d.slices.selective
	if memo {
		if v, ok := d.memo[key]; ok {
			return min(v, limit), nil
		}
	}
	res, err := d.allocate(ctx, node, d.want)
	if err != nil {
		return 0, err
	}
	n := len(res) / len(d.claims)
	if memo {
		d.memo[key] = n
	}
	return min(n, limit), nil
}

// allocate places up to k copies of the claims on the node, one copy at
// a time, each against the devices the copies before it took, as the
// scheduler allocates one pod's claims after another's; it stops at the
// first copy that does not fit. Placing the copies one by one keeps the
// allocator's search to one member's claims: searching all k copies at
// once makes it try every other arrangement of the copies that fitted
// before it concludes that one more does not (for claims of many
// requests, minutes per node).
func (d *draCapacity) allocate(ctx context.Context, node *corev1.Node, k int) ([]resourceapi.AllocationResult, error) {
	var out []resourceapi.AllocationResult
	defer func() {
		for _, r := range out {
			applyAllocation(d.state, r.Devices.Results, false)
		}
	}()
	for i := 0; i < k; i++ {
		if len(d.copies) <= i {
			var set []*resourceapi.ResourceClaim
			for _, c := range d.claims {
				cp := c.DeepCopy()
				cp.Name = fmt.Sprintf("%s-copy-%d", c.Name, i)
				cp.UID = types.UID(fmt.Sprintf("%s-copy-%d", c.UID, i))
				set = append(set, cp)
			}
			d.copies = append(d.copies, set)
		}
		// A new allocator per copy: an allocator may keep what it
		// derived from the allocated state between calls.
		alloc, err := structured.NewAllocator(ctx, d.e.features, *d.state, d.e.dra.DeviceClasses(), d.slices.forNode(node.Name), d.e.celCache)
		if err != nil {
			return nil, fmt.Errorf("device allocator: %w", err)
		}
		res, err := alloc.Allocate(ctx, node, d.copies[i])
		if err != nil {
			return nil, fmt.Errorf("simulate allocation on %s: %w", node.Name, err)
		}
		if len(res) < len(d.claims) {
			break
		}
		for _, r := range res {
			applyAllocation(d.state, r.Devices.Results, true)
		}
		out = append(out, res...)
	}
	return append([]resourceapi.AllocationResult(nil), out...), nil
}

// nodeSlices hands the allocator only the slices that can matter on one
// node: every slice of each pool that has a slice on the node or one not
// bound to a node (node selector, all nodes, per-device node selection).
// The allocator indexes and scans every slice it is given on each
// creation and each allocation, and a simulation creates one per member
// copy per node class: at 5,000 nodes that scan was most of a plan's
// time. Whole pools are kept so that the allocator's checks that span a
// pool (is it complete, which generation is current, counters defined in
// another of its slices) see what they would see with every slice.
type nodeSlices struct {
	shared []*resourceapi.ResourceSlice
	// selective: a shared pool is offered to some nodes only.
	selective bool
	pools     map[poolKey][]*resourceapi.ResourceSlice
	// onNode lists the pools with a slice on each node that are not
	// shared already.
	onNode map[string][]poolKey
	mu     sync.Mutex
	cache  map[string][]*resourceapi.ResourceSlice
}

type poolKey struct{ driver, pool string }

func newNodeSlices(all []*resourceapi.ResourceSlice) *nodeSlices {
	ns := &nodeSlices{pools: map[poolKey][]*resourceapi.ResourceSlice{}, onNode: map[string][]poolKey{}, cache: map[string][]*resourceapi.ResourceSlice{}}
	shared := map[poolKey]bool{}
	for _, s := range all {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		ns.pools[k] = append(ns.pools[k], s)
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			shared[k] = true
			ns.selective = ns.selective || s.Spec.AllNodes == nil || !*s.Spec.AllNodes
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(shared), comparePoolKeys) {
		ns.shared = append(ns.shared, ns.pools[k]...)
	}
	for _, s := range all {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if s.Spec.NodeName == nil || shared[k] {
			continue
		}
		if node := *s.Spec.NodeName; !slices.Contains(ns.onNode[node], k) {
			ns.onNode[node] = append(ns.onNode[node], k)
		}
	}
	return ns
}

func comparePoolKeys(a, b poolKey) int {
	if c := strings.Compare(a.driver, b.driver); c != 0 {
		return c
	}
	return strings.Compare(a.pool, b.pool)
}

// forNode returns the slices the allocator needs for the node.
func (ns *nodeSlices) forNode(node string) []*resourceapi.ResourceSlice {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if out, ok := ns.cache[node]; ok {
		return out
	}
	out := slices.Clone(ns.shared)
	for _, k := range ns.onNode[node] {
		out = append(out, ns.pools[k]...)
	}
	ns.cache[node] = out
	return out
}

func sortStrings(s []string) { sort.Strings(s) }
