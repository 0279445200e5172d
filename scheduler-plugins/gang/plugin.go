// Package gang is Strata's gang scheduling plugin with network-topology
// aware placement. See README.md for the algorithm and its invariants.
package gang

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	compositelisters "k8s.io/client-go/listers/scheduling/v1alpha3"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/strata-sh/strata/internal/gangspec"
	"github.com/strata-sh/strata/scheduler-plugins/gang/internal/jobpreempt"
)

// Name of the plugin in the scheduler configuration.
const Name = "StrataGang"

// Plugin places gangs all or nothing, inside network domains.
type Plugin struct {
	handle   fwk.Handle
	pods     corelisters.PodLister
	podIndex cache.Indexer
	src      *sources
	capacity *capacityEstimator
	status   *statusWriter
	// jobs is job-level preemption: victims, evictions, nominations.
	jobs *jobpreempt.Preemptor
	// upstream lists scheduling.k8s.io/v1beta1 PodGroups, composites
	// v1alpha3 CompositePodGroups; nil when the cluster does not serve
	// them (GenericWorkload, CompositePodGroup gates).
	upstream   schedulinglisters.PodGroupLister
	composites compositelisters.CompositePodGroupLister

	pdbLister policylisters.PodDisruptionBudgetLister
	// spares is what each proposed upstream placement leaves free.
	spares placementSpares
	// stale is the claims of unbound members being given back.
	stale staleReleases

	mu    sync.Mutex
	plans map[string]*plan
	// failures holds the last placement failure of each gang, which
	// PostFilter reports once it knows whether preemption helps.
	failures map[string]failure
	// satisfied remembers gangs that reached minMember, for the
	// once-satisfied match policy, and incarnations the life of the gang
	// that did so (its PodGroup UID and members; gangs.go).
	satisfied    map[string]bool
	incarnations map[string]*incarnation
	// gen counts, per gang group (its first key), the rounds of waiting
	// that ended (allowed, released or timed out); waitGen is the round
	// each waiting member joined. A member rejected in an earlier round
	// never counts toward a later one.
	gen     map[string]uint64
	waitGen map[types.UID]uint64
	// allowed holds members let go by Permit until they are bound.
	allowed map[types.UID]string
	// rejected holds the waiting members the plugin itself rejected when
	// it released their round, until their Unreserve: that round is over
	// already, and a later one must not be released for them.
	rejected map[types.UID]bool
	// profiles tells which profiles schedule gangs.
	profiles profiles
	// sortCache holds each gang's queue order by the version of its
	// definition; sortMu guards it (the queue calls Less under its own lock).
	sortMu    sync.Mutex
	sortCache map[string]sortEntry
	// draGen counts changes to claims and slices, which node generations
	// do not show; requeued counts the events that queued a member again
	// (see EventsToRegister). A failed plan is reused only while none of
	// them moved.
	draGen   atomic.Int64
	requeued atomic.Int64
}

var (
	_ fwk.QueueSortPlugin   = (*Plugin)(nil)
	_ fwk.PreEnqueuePlugin  = (*Plugin)(nil)
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.PostFilterPlugin  = (*Plugin)(nil)
	_ fwk.ReservePlugin     = (*Plugin)(nil)
	_ fwk.PermitPlugin      = (*Plugin)(nil)
	_ fwk.PostBindPlugin    = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)

	_ fwk.PlacementGeneratePlugin  = (*Plugin)(nil)
	_ fwk.PlacementScorePlugin     = (*Plugin)(nil)
	_ fwk.PlacementScoreExtensions = (*Plugin)(nil)
	_ fwk.PodGroupPostFilterPlugin = (*Plugin)(nil)
)

// cores holds one plugin state per scheduler: kube-scheduler creates a
// plugin instance per profile, and the profiles share the queue, the
// informers and the gangs.
var cores sync.Map // informers.SharedInformerFactory -> *Plugin

// New creates the plugin, or returns the one already created for another
// profile of the same scheduler. The scheduler's feature gates come in
// fts (runtime.FactoryAdapter makes it a plugin factory).
func New(ctx context.Context, _ runtime.Object, h fwk.Handle, fts feature.Features) (fwk.Plugin, error) {
	registerPreemptionMetrics()
	if existing, ok := cores.Load(h.SharedInformerFactory()); ok {
		existing.(*Plugin).profiles.add(h)
		return existing.(*Plugin), nil
	}
	dyn, err := dynamic.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, err
	}
	informer := h.SharedInformerFactory().Core().V1().Pods()
	if err := informer.Informer().AddIndexers(cache.Indexers{gangIndex: func(obj any) ([]string, error) {
		if k := gangKeyOf(obj.(*corev1.Pod)); k != "" {
			return []string{k}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	p := &Plugin{
		handle:    h,
		pods:      informer.Lister(),
		podIndex:  informer.Informer().GetIndexer(),
		src:       newSources(ctx, dyn),
		capacity:  newCapacityEstimator(h.SharedDRAManager(), fts),
		pdbLister: h.SharedInformerFactory().Policy().V1().PodDisruptionBudgets().Lister(),
		plans:     map[string]*plan{},
		failures:  map[string]failure{},
		satisfied: map[string]bool{},
		gen:       map[string]uint64{},
		waitGen:   map[types.UID]uint64{},
		allowed:   map[types.UID]string{},
		sortCache: map[string]sortEntry{},
	}
	if fts.EnableGenericWorkload {
		p.upstream = h.SharedInformerFactory().Scheduling().V1beta1().PodGroups().Lister()
	}
	if fts.EnableCompositePodGroup {
		p.composites = h.SharedInformerFactory().Scheduling().V1alpha3().CompositePodGroups().Lister()
	}
	p.status = newStatusWriter(ctx, p.src, h.EventRecorder())
	p.jobs = newPreemptor(p)
	go p.jobs.Run(ctx)
	// The scheduler's own informer for PodGroups and this plugin's are
	// different: the event that retries a member can come before the
	// plugin sees the PodGroup, and the member would be judged on the old
	// one (or none) and wait for an event that never comes. Seeing the
	// PodGroup here retries its pending members again.
	if p.src.podGroupInformer != nil {
		activate := func(obj any) {
			if m, err := meta.Accessor(obj); err == nil {
				p.activateMembers(klog.FromContext(ctx), m.GetNamespace()+"/"+m.GetName())
			}
		}
		if _, err := p.src.podGroupInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: activate,
			UpdateFunc: func(oldObj, obj any) {
				o, err1 := meta.Accessor(oldObj)
				n, err2 := meta.Accessor(obj)
				if err1 != nil || err2 != nil || o.GetGeneration() != n.GetGeneration() || !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) {
					activate(obj) // not for status writes
				}
			},
		}); err != nil {
			return nil, err
		}
	}
	// Without the GangScheduling feature gate kube-scheduler does not
	// retry gated pods when a pending pod arrives, so the member that
	// completes a gang wakes the members PreEnqueue held back.
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			p.jobs.ObservePod(pod)
			if pod.Spec.NodeName == "" {
				p.wakeGroup(klog.FromContext(ctx), gangKeyOf(pod))
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				p.jobs.ObservePod(pod)
				p.observeBound(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				p.status.forgetPod(pod.UID)
				p.forgetPod(pod.UID)
				if key := gangKeyOf(pod); key != "" {
					if objs, _ := p.podIndex.ByIndex(gangIndex, key); len(objs) == 0 {
						p.forgetGang(key)
					}
				}
			}
		},
	}); err != nil {
		return nil, err
	}
	bump := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.draGen.Add(1) },
		UpdateFunc: func(any, any) { p.draGen.Add(1) },
		DeleteFunc: func(any) { p.draGen.Add(1) },
	}
	if _, err := h.SharedInformerFactory().Resource().V1().ResourceClaims().Informer().AddEventHandler(bump); err != nil {
		return nil, err
	}
	if _, err := h.SharedInformerFactory().Resource().V1().ResourceSlices().Informer().AddEventHandler(bump); err != nil {
		return nil, err
	}
	p.profiles.add(h)
	cores.Store(h.SharedInformerFactory(), p)
	go func() {
		<-ctx.Done()
		cores.Delete(h.SharedInformerFactory())
	}()
	return p, nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// Less implements fwk.QueueSortPlugin: priority first, then the gang's
// (or pod's) age, then the gang, so that the members of a gang — and the
// gangs of a group — are popped one after another. With the upstream
// workload API on, the queue also holds whole pod groups, which sort by
// their PodGroup the same way.
func (p *Plugin) Less(a, b fwk.QueuedEntityInfo) bool {
	if x, y := a.GetPriority(), b.GetPriority(); x != y {
		return x > y
	}
	ta, ka, na := p.sortKey(a)
	tb, kb, nb := p.sortKey(b)
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	if ka != kb {
		return ka < kb
	}
	return na < nb
}

// queuedPod and queuedGroup are what the scheduler's queued entities
// expose besides fwk.QueuedEntityInfo: a pod, or a pod group's identity.
type (
	queuedPod   interface{ GetPodInfo() fwk.PodInfo }
	queuedGroup interface {
		GetNamespace() string
		GetName() string
	}
)

// sortKey returns the time a queued entity sorts by, its gang group and a
// name that breaks the remaining ties.
func (p *Plugin) sortKey(q fwk.QueuedEntityInfo) (time.Time, string, string) {
	var pod *corev1.Pod
	var key, name string
	switch e := q.(type) {
	case queuedPod:
		pod = e.GetPodInfo().GetPod()
		key, name = gangKeyOf(pod), pod.Name
	case queuedGroup:
		key, name = e.GetNamespace()+"/"+e.GetName(), e.GetName()
	}
	if key == "" {
		return q.GetTimestamp(), "", name
	}
	// The comparator runs O(log n) times per queue operation: the gang's
	// order is decoded once per version of its definition.
	version := p.specVersion(key)
	p.sortMu.Lock()
	e, hit := p.sortCache[key]
	p.sortMu.Unlock()
	if !hit || e.version != version {
		e = sortEntry{version: version, group: key}
		if g := p.specByKey(key, pod); g.err == nil {
			e.ok, e.at, e.group = true, g.created.Time, g.group[0]
			for _, k := range g.group {
				if k == key {
					continue
				}
				ns, n, _ := cache.SplitMetaNamespaceKey(k)
				if pg := p.src.podGroup(ns, n); pg != nil && pg.CreationTimestamp.Time.Before(e.at) {
					e.at = pg.CreationTimestamp.Time
				}
			}
		}
		p.sortMu.Lock()
		p.sortCache[key] = e
		p.sortMu.Unlock()
	}
	if !e.ok {
		return q.GetTimestamp(), key, name
	}
	return e.at, e.group, name
}

// sortEntry is a gang's place in the queue order.
type sortEntry struct {
	version string
	ok      bool
	at      time.Time
	group   string
}

// specVersion names the version of a gang's definition without decoding
// it: its PodGroup's resourceVersion, or, for a gang declared on pods, a
// constant (members carry the same annotations; the entry goes with the
// gang's last pod).
func (p *Plugin) specVersion(key string) string {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	if p.src.podGroups != nil {
		if obj, err := p.src.podGroups.ByNamespace(ns).Get(name); err == nil {
			if m, err := meta.Accessor(obj); err == nil {
				return "podgroup/" + m.GetResourceVersion()
			}
		}
	}
	if pg := p.upstreamPodGroup(ns, name); pg != nil {
		return "upstream/" + pg.ResourceVersion
	}
	return "pods"
}

// PreEnqueue implements fwk.PreEnqueuePlugin: a gang pod waits outside the
// active queue until every gang of its group has minMember pods.
//
// kube-scheduler shows nothing of a PreEnqueue rejection (the pod just
// stays Pending), so the reason goes where a user looks: the PodGroup's
// Scheduled condition and an event on it, or, for a gang declared on pods
// alone, an event on the pod.
func (p *Plugin) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	g := p.confined(p.gangOf(pod))
	if g == nil || g.upstream {
		return nil
	}
	if g.err == nil {
		if _, from, ok := annotation(pod.Annotations, KeyNetworkTopologyIndex); ok {
			g.err = fmt.Errorf("pod %s: %w", pod.Name, gangspec.IndexError(from))
		}
	}
	if g.err != nil {
		p.status.waiting(g, pod, ReasonInvalidGang, g.err.Error())
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, g.err.Error())
	}
	for _, key := range g.group {
		spec := g
		if key != g.key {
			spec = p.specByKey(key, nil)
		}
		if have := len(p.members(key)); have < spec.minMember {
			msg := fmt.Sprintf("gang %s has %d of %d pods; waiting for %s", key, have, spec.minMember, plural(spec.minMember-have, "more member"))
			p.status.waiting(g, pod, ReasonWaitingForMembers, msg)
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
		}
	}
	return nil
}

// PreFilter implements fwk.PreFilterPlugin: the first member of a gang to
// be scheduled computes where every pending member goes, per member
// shape; members then only see their shape's nodes of that plan.
//
// The plan is computed without holding the plugin's lock: scheduling
// cycles run one at a time, and Filter, Reserve and the binding cycles
// of other pods must not wait on a plan computation.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if isProbe(state) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	g := p.gangOf(pod)
	if g == nil {
		if p.hasNominations() {
			return nil, nil // Filter keeps this pod off room reserved for a gang
		}
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if g.err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, g.err.Error())
	}
	if g.upstream {
		// Placed by the scheduler's pod-group cycle, in the placements
		// GeneratePlacements proposes. Filter, Reserve and Unreserve read
		// the mark instead of looking the gang up again: the pod-group
		// preemption runs them for every member once per candidate victim.
		state.Write(upstreamStateKey, mark{})
		if !p.hasNominations() {
			// Nothing reserved to keep it off: Filter need not run.
			return nil, fwk.NewStatus(fwk.Skip)
		}
		return nil, nil
	}
	shape := p.shapeOf(pod)
	state.Write(shapeStateKey, shapeState(shape))
	p.noteReservedOutside(state, pod, g)
	p.retractScheduled(g)
	p.mu.Lock()
	pl := p.plans[g.key]
	var room sets.Set[string]
	if pl != nil && time.Since(pl.created) <= planTTL {
		room = pl.nodes(shape)
	}
	p.mu.Unlock()
	if room.Len() == 0 {
		if f, ok := p.recentFailure(g.key, nodes); ok {
			state.Write(failFastStateKey, mark{})
			code := fwk.Unschedulable
			if f.final {
				code = fwk.UnschedulableAndUnresolvable
			}
			return nil, fwk.NewStatus(code, f.msg)
		}
		var st *fwk.Status
		if pl, st = p.computePlan(ctx, pod, g, nodes); !st.IsSuccess() {
			return nil, st
		}
		p.mu.Lock()
		p.plans[g.key] = pl
		room = pl.nodes(shape)
		p.mu.Unlock()
	}
	return &fwk.PreFilterResult{NodeNames: room}, nil
}

// failFastStateKey marks a cycle whose PreFilter answered with the gang's
// recent failure.
const failFastStateKey fwk.StateKey = Name + "/fail-fast"

// upstreamStateKey marks a cycle of a member of an upstream workload-API
// group, which StrataGang neither plans nor holds at Permit.
const upstreamStateKey fwk.StateKey = Name + "/upstream"

// mark is the value of a cycle-state key whose presence is the news.
type mark struct{}

func (mark) Clone() fwk.StateData { return mark{} }

// marked reports whether the cycle state holds the key.
func marked(state fwk.CycleState, key fwk.StateKey) bool {
	if state == nil {
		return false
	}
	_, err := state.Read(key)
	return err == nil
}

// isUpstreamMember reports whether PreFilter marked the cycle as an
// upstream group member's.
func isUpstreamMember(state fwk.CycleState) bool { return marked(state, upstreamStateKey) }

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter implements fwk.FilterPlugin: a gang member goes only where its
// plan has room left for its shape; any other pod stays off nodes whose
// freed room is nominated to another gang of the same or higher priority.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if isProbe(state) {
		return nil
	}
	key := gangKeyOf(pod)
	if holder := p.reservedFor(ni.Node().Name, corev1helpers.PodPriority(pod), key); holder != "" && !leftToGroup(state, ni.Node().Name) {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node's freed room is reserved for gang %s", holder))
	}
	if key == "" || isUpstreamMember(state) {
		return nil
	}
	shape := p.shapeFromState(state, pod)
	p.mu.Lock()
	pl := p.plans[key]
	left, where := 0, ""
	if pl != nil {
		left, where = pl.remaining[shape][ni.Node().Name], pl.where
	}
	p.mu.Unlock()
	if pl == nil {
		// Upstream groups have no plan (the pod-group cycle places them),
		// nor do members in a profile without gang scheduling; looking the
		// gang up only here keeps Filter, which runs per node, free of spec
		// lookups.
		if g := p.gangOf(pod); g == nil || g.upstream {
			return nil
		}
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s has no placement plan", key))
	}
	if left <= 0 {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node is outside the placement of gang %s (%s)", key, where))
	}
	return nil
}

// PostFilter implements fwk.PostFilterPlugin: a gang member that cannot
// be placed releases its group, and the gang preempts lower-priority jobs
// as a whole if that makes room for all its members (job-level
// preemption); otherwise nothing is evicted. Pods that are not in a gang
// are left to the default preemption.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	g := p.confined(p.gangOf(pod))
	if g == nil || g.upstream {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	// DynamicResources' PostFilter, after this one, does not run for a
	// member: what an earlier cycle of the member left is given back here.
	p.releaseStaleClaims(ctx, pod)
	if marked(state, failFastStateKey) {
		// The gang's plan failed moments ago on this very snapshot, and
		// that attempt already decided about preemption.
		p.mu.Lock()
		out := p.failures[g.key].outcome
		p.mu.Unlock()
		if out != nil {
			return nil, out
		}
	}
	if g.nonStrict {
		// Koordinator's NonStrict mode: the members waiting in Permit
		// keep waiting (until their timeout); only the plan is redone.
		p.mu.Lock()
		delete(p.plans, g.key)
		p.mu.Unlock()
	} else {
		p.releaseGroup(g, fmt.Sprintf("member %s could not be placed", pod.Name))
	}
	if g.err != nil {
		return nil, afterPreFilter(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, g.err.Error()), g.err.Error())
	}
	// UnschedulableAndUnresolvable from preempt also keeps the scheduler's
	// pod-by-pod preemption from evicting for a single member.
	why := p.lastFailure(g.key).msg
	start := time.Now()
	res, st := p.preempt(ctx, pod, g)
	observePreemption(start, st)
	if st.IsSuccess() {
		return res, st
	}
	if !p.boundEnough(g) {
		// One condition per attempt, written when the outcome is known,
		// so the PodGroup says both why and whether eviction would help.
		p.status.unschedulable(g, st.Message())
	}
	st = afterPreFilter(st, why)
	p.mu.Lock()
	if f, ok := p.failures[g.key]; ok {
		f.outcome = st
		p.failures[g.key] = f
	}
	p.mu.Unlock()
	return res, st
}

// afterPreFilter drops from a PostFilter status what PreFilter already
// said: kube-scheduler writes both into the pod's condition, one after
// the other, and the reason would read twice.
func afterPreFilter(st *fwk.Status, why string) *fwk.Status {
	rest, found := strings.CutPrefix(st.Message(), why)
	if !found || why == "" {
		return st
	}
	if rest = strings.TrimLeft(rest, "; ."); rest == "" {
		return fwk.NewStatus(st.Code())
	}
	return fwk.NewStatus(st.Code(), rest)
}

// Reserve implements fwk.ReservePlugin: the member takes its room in the
// plan.
func (p *Plugin) Reserve(_ context.Context, state fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	key := gangKeyOf(pod)
	if key == "" || isUpstreamMember(state) {
		return nil
	}
	shape := p.shapeFromState(state, pod)
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl := p.plans[key]; pl != nil && pl.remaining[shape] != nil {
		pl.remaining[shape][node]--
		pl.assigned[pod.UID] = slot{shape: shape, node: node}
	}
	return nil
}
