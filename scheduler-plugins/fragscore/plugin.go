// Package fragscore is StrataFragmentation, the score plugin that places
// pods where the cluster keeps most of its GPUs usable: the node whose
// expected lost GPU (package fragment) grows least with the pod on it.
//
// # What it reads
//
//   - The GPUs: the devices of the configured DeviceClasses in each
//     node's own ResourceSlices, in slice order (the order in which the
//     DRA allocator tries them). A GPU's free share is what its claims
//     leave: none when one claim holds it whole; for shared GPUs the less
//     of cores and memory left (consumable capacity "cores", percent, and
//     "memory", bytes, as the nvidia.strata.sh plugin publishes them).
//     A GPU that draws on a counter set with an allocated device (its
//     MIG instances, under the plugin's dynamic MIG mode) has no free
//     share: the allocator gives out neither the GPU nor a share of it.
//   - The MIG placements: the devices of the configured MIG classes that
//     draw on a GPU's counter set (the plugin's dynamic MIG mode). Their
//     "profile", "placementStart" and "placementSize" attributes lay out
//     the GPU's memory slices; the allocated ones are its instances.
//     Slices that a GPU's placements leave out while other GPUs of the
//     node publish them are held by instances the plugin did not make.
//   - The pod: its CPU and memory requests, and what its claims ask of
//     those classes (a request's count; a share from its "cores"
//     capacity request, or the first alternative's of a firstAvailable
//     request). A claim already allocated adds nothing. A request of a
//     MIG class asks for that many instances of the profile of the first
//     placement, in slice order on the feasible nodes, that its selectors
//     select (where they select several profiles, the allocator's first
//     choice); a pod with a whole or shared GPU request is measured by
//     it alone. On a node without the profile's placements (MIG made by
//     an operator, the plugin's static mode) a MIG pod is measured by its
//     CPU and memory.
//   - The expected mix: every pod the plugin scores is counted in a
//     histogram of task shapes whose weights halve every HalfLifePods
//     pods. A GPU pod's accepted models are those of the nodes that
//     passed the filters.
//
// # Score
//
// PreScore computes for each feasible node the fragmentation increase of
// placing the pod on the GPUs first fit would give it. The raw score is
// that increase negated; NormalizeScore ranks the nodes, best first and
// node name second on equal increases, and gives the best 100, the next
// 99 and so on. Ranking rather than scaling is deliberate: many nodes
// tie (empty ones, full ones), and kube-scheduler breaks ties between
// equal totals at random, which spreads pods and costs whole GPUs; a
// fixed order keeps the later nodes whole for large pods.
package fragscore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/strata-sh/strata/api/schedulerargs"
	"github.com/strata-sh/strata/scheduler-plugins/fragment"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
)

// Name of the plugin in the scheduler configuration.
const Name = "StrataFragmentation"

// gpus and migs are the internal resource names the classes are counted
// under.
const (
	gpus corev1.ResourceName = "strata.sh/fragmentation-gpus"
	migs corev1.ResourceName = "strata.sh/fragmentation-mig"
)

// Capacity names of a shared GPU.
const (
	capCores  resourceapi.QualifiedName = "cores"
	capMemory resourceapi.QualifiedName = "memory"
)

// Plugin scores nodes by the fragmentation a pod's placement adds.
type Plugin struct {
	classNames    []string
	migClassNames []string
	opts          fragment.Options
	requests      resourcehelper.PodResourcesOptions
	dra           fwk.SharedDRAManager
	devices       *devicecount.Counter
	// layouts keeps the nodes' MIG layouts across cycles.
	layouts layouts

	mu   sync.Mutex
	hist *fragment.Histogram
	seen map[types.UID]bool
	// mix is the workload last built from hist, shapes how many shapes
	// it had then, and stale how many pods were observed since.
	mix    *fragment.Workload
	shapes int
	stale  int
}

var (
	_ fwk.PreScorePlugin  = (*Plugin)(nil)
	_ fwk.ScorePlugin     = (*Plugin)(nil)
	_ fwk.ScoreExtensions = (*Plugin)(nil)
	_ fwk.SignPlugin      = (*Plugin)(nil)
)

// New creates the plugin from StrataFragmentationArgs (defaulted), after
// validating them; the error names the invalid field.
func New(_ context.Context, obj runtime.Object, h fwk.Handle, fts feature.Features) (fwk.Plugin, error) {
	args := &schedulerargs.StrataFragmentationArgs{}
	switch a := obj.(type) {
	case nil:
	case *schedulerargs.StrataFragmentationArgs:
		if a != nil {
			args = a.DeepCopy()
		}
	default:
		return nil, fmt.Errorf("want args of type StrataFragmentationArgs, got %T", obj)
	}
	args.Default()
	if errs := args.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s args: %w", Name, errs.ToAggregate())
	}
	var dra fwk.SharedDRAManager
	if h != nil {
		dra = h.SharedDRAManager()
	}
	return &Plugin{
		classNames:    args.DeviceClasses,
		migClassNames: args.MIGDeviceClasses,
		opts:          fragment.Options{Coverage: float64(args.CoveragePercent) / 100, Alpha: float64(*args.UnreachableWeight) / 100},
		requests: resourcehelper.PodResourcesOptions{
			UseStatusResources:    fts.EnableInPlacePodVerticalScaling,
			SkipPodLevelResources: !fts.EnablePodLevelResources,
		},
		dra:     dra,
		devices: devicecount.New(dra, []corev1.ResourceName{gpus}, fts),
		hist:    &fragment.Histogram{HalfLife: float64(*args.HalfLifePods)},
		seen:    map[types.UID]bool{},
	}, nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// SignPod implements fwk.SignPlugin, so that the profile keeps
// kube-scheduler's batching of like pods: a pod's score depends on its
// requests and its claims, and pods with claims are not batched.
func (p *Plugin) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if len(pod.Spec.ResourceClaims) > 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with resource claims are not signable")
	}
	return []fwk.SignFragment{{Key: devicecount.RequestsSignerName, Value: resourcehelper.PodRequests(pod, p.requests)}}, nil
}

const stateKey fwk.StateKey = Name

// state holds the cycle's raw scores by node.
type state struct{ raw map[string]int64 }

func (s *state) Clone() fwk.StateData { return s }

// PreScore measures each feasible node.
func (p *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	st, err := p.measure(ctx, cs, pod, nodes)
	if err != nil {
		return fwk.AsStatus(err)
	}
	cs.Write(stateKey, st)
	return nil
}

// Score implements fwk.ScorePlugin: the raw score PreScore computed.
func (p *Plugin) Score(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	d, err := cs.Read(stateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s: PreScore did not run: %w", Name, err))
	}
	return d.(*state).raw[ni.Node().Name], nil
}

// ScoreExtensions implements fwk.ScorePlugin.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore ranks the nodes: 100 for the least added fragmentation,
// one less for each next node (node name second), 0 from the 101st.
func (p *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	order := make([]int, len(scores))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		sa, sb := scores[order[a]], scores[order[b]]
		if sa.Score != sb.Score {
			return sa.Score > sb.Score
		}
		return sa.Name < sb.Name
	})
	for rank, i := range order {
		scores[i].Score = max(fwk.MaxNodeScore-int64(rank), fwk.MinNodeScore)
	}
	return nil
}

// scale turns a fragmentation increase (milli-GPU, fractional) into an
// integer raw score that keeps a thousandth of a milli.
const scale = 1000

func (p *Plugin) measure(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*state, error) {
	st := &state{raw: make(map[string]int64, len(nodes))}
	classes, migClasses := p.classes(p.classNames), p.classes(p.migClassNames)
	task, migReqs := p.task(pod, classes, migClasses)
	devs, err := p.devices.Devices(ctx, devicecount.Classes{gpus: classes}, gpus, nodes)
	if err != nil {
		return nil, err
	}
	var placements map[string][]devicecount.NodeDevice
	if len(migClasses) > 0 && drawOnCounters(devs) {
		if placements, err = p.devices.Devices(ctx, devicecount.Classes{migs: migClasses}, migs, nodes); err != nil {
			return nil, err
		}
	}
	alloc, err := p.devices.AllocatedState(cs)
	if err != nil {
		return nil, err
	}
	view := make([]fragment.Node, len(nodes))
	models := map[string]bool{}
	for i, ni := range nodes {
		name := ni.Node().Name
		view[i] = nodeView(ni, devs[name], p.layouts.get(name, devs[name], placements[name]), alloc)
		if len(view[i].GPUs) > 0 {
			models[view[i].Model] = true
		}
	}
	if len(migReqs) > 0 {
		task = p.migTask(ctx, task, migReqs, nodes, placements, view)
	}
	if task.GPUs > 0 {
		task.Models = slices.Sorted(func(yield func(string) bool) {
			for m := range models {
				if !yield(m) {
					return
				}
			}
		})
	}
	w := p.observe(pod.UID, task)
	hostOnly := fragment.Task{CPU: task.CPU, Memory: task.Memory}
	for i, ni := range nodes {
		n := &view[i]
		t := task
		if t.Profile != "" && (n.MIG == nil || len(n.MIG.Profiles[t.Profile]) == 0) {
			t = hostOnly
		}
		g, ok := fragment.FirstFit(n, t)
		if !ok {
			st.raw[ni.Node().Name] = math.MinInt64 / 2
			continue
		}
		st.raw[ni.Node().Name] = -int64(math.Round(w.Delta(n, t, g) * scale))
	}
	return st, nil
}

// observe counts the pod in the mix once and returns the mix.
func (p *Plugin) observe(uid types.UID, t fragment.Task) *fragment.Workload {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen[uid] {
		if len(p.seen) > 1<<18 {
			p.seen = map[types.UID]bool{}
		}
		p.seen[uid] = true
		p.hist.Observe(t)
		p.stale++
	}
	// Building the mix merges every shape: it is rebuilt when a shape is
	// new, and otherwise after rebuildEvery pods, whose weight moves the
	// mix by a few thousandths at the default half-life.
	if p.mix == nil || p.hist.Len() != p.shapes || p.stale >= rebuildEvery {
		p.mix, p.shapes, p.stale = p.hist.Workload(p.opts), p.hist.Len(), 0
	}
	return p.mix
}

// rebuildEvery is how many pods the mix may be behind by.
const rebuildEvery = 32

func (p *Plugin) classes(names []string) []*resourceapi.DeviceClass {
	if p.dra == nil {
		return nil
	}
	var out []*resourceapi.DeviceClass
	for _, name := range names {
		c, err := p.dra.DeviceClasses().Get(name)
		if err != nil {
			continue // not installed
		}
		out = append(out, c)
	}
	return out
}

// migRequest is a claim's request for MIG instances: how many, and the
// request's own selectors (its class's select the placements).
type migRequest struct {
	count     int64
	selectors []resourceapi.DeviceSelector
}

// task is what the pod asks, as the fragment package sees it, and its
// requests for MIG instances, whose profile depends on the placements the
// nodes publish.
func (p *Plugin) task(pod *corev1.Pod, classes, migClasses []*resourceapi.DeviceClass) (fragment.Task, []migRequest) {
	req := resourcehelper.PodRequests(pod, p.requests)
	t := fragment.Task{CPU: req.Cpu().MilliValue(), Memory: req.Memory().Value()}
	if p.dra == nil || len(classes)+len(migClasses) == 0 {
		return t, nil
	}
	names, migNames := map[string]bool{}, map[string]bool{}
	for _, c := range classes {
		names[c.Name] = true
	}
	for _, c := range migClasses {
		migNames[c.Name] = true
	}
	var migReqs []migRequest
	for _, pc := range pod.Spec.ResourceClaims {
		claim := p.claimOf(pod, pc)
		if claim == nil || claim.Status.Allocation != nil {
			continue
		}
		for _, r := range claim.Spec.Devices.Requests {
			class, count, capacity, selectors := "", int64(0), (*resourceapi.CapacityRequirements)(nil), []resourceapi.DeviceSelector(nil)
			switch {
			case r.Exactly != nil:
				class, count, capacity, selectors = r.Exactly.DeviceClassName, r.Exactly.Count, r.Exactly.Capacity, r.Exactly.Selectors
			case len(r.FirstAvailable) > 0:
				s := r.FirstAvailable[0]
				class, count, capacity, selectors = s.DeviceClassName, s.Count, s.Capacity, s.Selectors
			}
			count = max(count, 1)
			if migNames[class] {
				migReqs = append(migReqs, migRequest{count: count, selectors: selectors})
				continue
			}
			if !names[class] {
				continue
			}
			if capacity != nil {
				if q, ok := capacity.Requests[capCores]; ok && q.Value() < 100 {
					t.GPUs, t.Milli = 1, int32(q.Value()*10)
					continue
				}
			}
			t.GPUs += int(count)
			t.Milli = fragment.Whole
		}
	}
	if t.GPUs > 1 {
		t.Milli = fragment.Whole
	}
	if t.GPUs > 0 {
		migReqs = nil
	}
	return t, migReqs
}

// drawOnCounters says whether any GPU draws on a counter set: only then
// can it have MIG placements to read.
func drawOnCounters(devs map[string][]devicecount.NodeDevice) bool {
	for _, node := range devs {
		for _, d := range node {
			if len(d.Device.ConsumesCounters) > 0 {
				return true
			}
		}
	}
	return false
}

// migTask turns the pod's MIG requests into instances of one profile:
// the profile of the first placement the first request selects, in slice
// order on the feasible nodes, and as many instances as the requests ask
// for in all. Without such a placement the pod is measured by its CPU
// and memory.
func (p *Plugin) migTask(ctx context.Context, t fragment.Task, reqs []migRequest, nodes []fwk.NodeInfo, placements map[string][]devicecount.NodeDevice, view []fragment.Node) fragment.Task {
	for i, ni := range nodes {
		if view[i].MIG == nil {
			continue
		}
		for _, d := range placements[ni.Node().Name] {
			if !p.devices.Selects(ctx, reqs[0].selectors, d.ID.Driver.String(), d.Device) {
				continue
			}
			profile, _, size, ok := placementOf(d.Device)
			if !ok {
				continue
			}
			t.Profile = profile
			t.Milli = int32(size * fragment.Whole / int64(view[i].MIG.Slices))
			for _, r := range reqs {
				t.GPUs += int(r.count)
			}
			return t
		}
	}
	return t
}

func (p *Plugin) claimOf(pod *corev1.Pod, pc corev1.PodResourceClaim) *resourceapi.ResourceClaim {
	name := ""
	if pc.ResourceClaimName != nil {
		name = *pc.ResourceClaimName
	} else {
		for _, s := range pod.Status.ResourceClaimStatuses {
			if s.Name == pc.Name && s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
			}
		}
	}
	if name == "" {
		return nil
	}
	c, err := p.dra.ResourceClaims().Get(pod.Namespace, name)
	if err != nil {
		return nil
	}
	return c
}

// nodeView is a node's free CPU, memory and GPUs, and its GPUs' MIG
// layout and instances where it publishes placements (ml, laid out by
// layoutOf; nil if it has none).
func nodeView(ni fwk.NodeInfo, devs []devicecount.NodeDevice, ml *nodeLayout, alloc *structured.AllocatedState) fragment.Node {
	a, r := ni.GetAllocatable(), ni.GetRequested()
	n := fragment.Node{CPU: a.GetMilliCPU() - r.GetMilliCPU(), Memory: a.GetMemory() - r.GetMemory()}
	var maskOf map[structured.DeviceID]uint32
	if ml != nil && ml.layout != nil {
		maskOf, n.MIG, n.Slices = ml.maskOf, ml.layout, make([]uint32, len(devs))
	}
	for i, d := range devs {
		if n.Model == "" {
			n.Model = modelOf(d.Device)
		}
		free, instances := freeShare(d, alloc, maskOf)
		if n.MIG != nil && ml.published[i] != 0 {
			// Slices no placement of this GPU covers are held by
			// instances the plugin did not make.
			if instances |= ml.all &^ ml.published[i]; instances != 0 {
				free = 0
			}
			n.Slices[i] = instances
		}
		n.GPUs = append(n.GPUs, free)
	}
	return n
}

// nodeLayout is what a node's published placements say, whatever is
// allocated: the GPUs' MIG layout, and for each placement its GPU and
// slices. It changes only when the node's slices do.
type nodeLayout struct {
	// key identifies the GPUs and placements it was laid out from (see
	// layoutKey): a placement's attributes follow from its name.
	key uint64
	// layout is nil when no placement belongs to a GPU.
	layout *fragment.MIGLayout
	// maskOf holds the slices of each placement that belongs to a GPU.
	maskOf map[structured.DeviceID]uint32
	// published holds, per GPU, the slices its placements cover; all,
	// those of any GPU.
	published []uint32
	all       uint32
}

// layoutOf lays out a node's MIG placements: each belongs to the GPU
// whose counter set it draws on.
func layoutOf(devs, placements []devicecount.NodeDevice) *nodeLayout {
	ml := &nodeLayout{key: layoutKey(devs, placements), maskOf: make(map[structured.DeviceID]uint32, len(placements)), published: make([]uint32, len(devs))}
	// A counter set is named within its pool: the key is the pool (a
	// device ID without its device) and the name.
	type counterSet struct {
		pool structured.DeviceID
		name string
	}
	poolOf := func(id structured.DeviceID) structured.DeviceID {
		id.Device = structured.DeviceID{}.Device
		return id
	}
	gpuOf := map[counterSet]int{}
	for i, d := range devs {
		for _, cc := range d.Device.ConsumesCounters {
			gpuOf[counterSet{poolOf(d.ID), cc.CounterSet}] = i
		}
	}
	layout := &fragment.MIGLayout{Profiles: map[string][]uint32{}}
	for _, d := range placements {
		profile, start, size, ok := placementOf(d.Device)
		if !ok || len(d.Device.ConsumesCounters) == 0 || start+size > 32 {
			continue
		}
		gpu, ok := gpuOf[counterSet{poolOf(d.ID), d.Device.ConsumesCounters[0].CounterSet}]
		if !ok {
			continue
		}
		mask := fragment.Placement(int(start), int(size))
		layout.Slices = max(layout.Slices, int(start+size))
		if !slices.Contains(layout.Profiles[profile], mask) {
			layout.Profiles[profile] = append(layout.Profiles[profile], mask)
		}
		ml.maskOf[d.ID] = mask
		ml.published[gpu] |= mask
		ml.all |= mask
	}
	if layout.Slices == 0 {
		return ml
	}
	for profile, masks := range layout.Profiles {
		slices.SortFunc(masks, func(a, b uint32) int { return bits.TrailingZeros32(a) - bits.TrailingZeros32(b) })
		layout.Profiles[profile] = masks
	}
	ml.layout = layout
	return ml
}

// layouts keeps each node's nodeLayout across cycles.
type layouts struct {
	mu    sync.Mutex
	nodes map[string]*nodeLayout
}

// get returns the node's layout, laid out again if its placements
// changed.
func (l *layouts) get(node string, devs, placements []devicecount.NodeDevice) *nodeLayout {
	if len(placements) == 0 || len(devs) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ml := l.nodes[node]
	if ml != nil && ml.key == layoutKey(devs, placements) {
		return ml
	}
	if l.nodes == nil || len(l.nodes) > maxLayouts {
		// Nodes come and go; forget them all now and then.
		l.nodes = map[string]*nodeLayout{}
	}
	ml = layoutOf(devs, placements)
	l.nodes[node] = ml
	return ml
}

// layoutKey hashes the devices' IDs, in order: what identifies a node's
// layout whatever objects hold the devices (a slice republished
// unchanged is a new object). An ID hashes in nanoseconds.
func layoutKey(devs, placements []devicecount.NodeDevice) uint64 {
	var k uint64
	for _, list := range [][]devicecount.NodeDevice{devs, placements} {
		for _, d := range list {
			k = k*1099511628211 ^ maphash.Comparable(layoutSeed, d.ID)
		}
		k = k*1099511628211 ^ uint64(len(list))
	}
	return k
}

var layoutSeed = maphash.MakeSeed()

// maxLayouts bounds the nodes whose layouts are kept.
const maxLayouts = 1 << 16

// placementOf reads a MIG placement device's profile and slices.
func placementOf(d *resourceapi.Device) (profile string, start, size int64, ok bool) {
	p, s, z := attribute(d, "profile"), attribute(d, "placementStart"), attribute(d, "placementSize")
	if p == nil || p.StringValue == nil || s == nil || s.IntValue == nil || z == nil || z.IntValue == nil || *z.IntValue <= 0 || *s.IntValue < 0 {
		return "", 0, 0, false
	}
	return *p.StringValue, *s.IntValue, *z.IntValue, true
}

// attribute finds a device attribute by name, with or without its
// domain.
func attribute(d *resourceapi.Device, name string) *resourceapi.DeviceAttribute {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok {
		return &a
	}
	for key, a := range d.Attributes {
		if strings.HasSuffix(string(key), "/"+name) {
			return &a
		}
	}
	return nil
}

// modelOf names a GPU's model: its product name where the driver
// publishes one, else the vendor-neutral model.
func modelOf(d *resourceapi.Device) string {
	if a := attribute(d, "productName"); a != nil && a.StringValue != nil {
		return *a.StringValue
	}
	if a, ok := d.Attributes["accelerator.strata.sh/model"]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// freeShare is what a GPU's claims leave of it, in milli, and the slices
// of its MIG instances: the allocated devices among those sharing its
// counters that maskOf knows as its placements (nil: none are looked
// for). A GPU that shares counters with an allocated device is not free
// at all: the allocator gives out neither the whole GPU nor a share of
// it then.
func freeShare(d devicecount.NodeDevice, alloc *structured.AllocatedState, maskOf map[structured.DeviceID]uint32) (int32, uint32) {
	if alloc.AllocatedDevices.Has(d.ID) {
		return 0, 0
	}
	held, instances := false, uint32(0)
	for _, id := range d.Sharing {
		if id == d.ID {
			continue
		}
		if _, shared := alloc.AggregatedCapacity[id]; shared || alloc.AllocatedDevices.Has(id) {
			held = true
			if maskOf == nil {
				break
			}
			instances |= maskOf[id]
		}
	}
	if held {
		return 0, instances
	}
	used, ok := alloc.AggregatedCapacity[d.ID]
	if !ok {
		return fragment.Whole, 0
	}
	free := int64(fragment.Whole)
	for name, total := range d.Device.Capacity {
		if name != capCores && name != capMemory {
			continue
		}
		q, ok := used[name]
		if !ok || q == nil || total.Value.Value() == 0 {
			continue
		}
		left := (total.Value.Value() - q.Value()) * fragment.Whole / total.Value.Value()
		free = min(free, max(left, 0))
	}
	return int32(free), 0
}
