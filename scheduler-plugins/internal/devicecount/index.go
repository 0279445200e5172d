package devicecount

import (
	"cmp"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// Index keeps, from informer events, each node's own ResourceSlices and
// what claims hold of each device, so that a scheduling cycle reads the
// nodes it searches and nothing else: no pass over every slice or claim
// of the cluster.
//
//   - Slices: per pool the newest generation (older ones are being
//     replaced), and of those, per node, the node-local slices
//     (spec.nodeName without per-device node selection), in the order the
//     allocator gathers them; the other current slices (nodeSelector,
//     allNodes, per-device node selection) are few and kept apart.
//   - Claims: per device, the claims whose allocation holds it, whole or
//     as a share with the capacity it consumes (admin access is not an
//     allocation), as the informer last delivered them.
//
// Every change bumps the version of the nodes it touches (a slice's
// node; for a claim, the nodes of its devices' pools), so a reader can
// keep figures per node and know when they are out of date.
//
// What the informer delivers can be ahead of or behind the scheduler's
// own view of claims (its assume cache and allocations in flight); a
// reader that must agree with that view checks holders against it (see
// Holder).
type Index struct {
	consumable bool

	mu sync.RWMutex
	// version is bumped on every change; a node's version is the value
	// at its last change.
	version uint64
	// pools holds every slice by pool and name.
	pools map[pool]*poolSlices
	// nodes holds each node's current node-local slices, nodePools the
	// pools that have some on the node.
	nodes     map[string]*nodeEntry
	nodePools map[string]map[pool]struct{}
	// wide holds the current slices that are not node-local, by name.
	wide map[string]*resourceapi.ResourceSlice
	// claims holds the allocated claims as recorded, by UID, and holders
	// what they hold, by device.
	claims  map[types.UID]*resourceapi.ResourceClaim
	holders map[structured.DeviceID][]Holder

	synced []cache.InformerSynced
}

type poolSlices struct {
	slices map[string]*resourceapi.ResourceSlice
	// newest is the newest generation; nodes the nodes of its node-local
	// slices.
	newest int64
	nodes  []string
}

type nodeEntry struct {
	// slices are the node's current node-local slices, sorted as the
	// allocator gathers them; replaced, never changed in place.
	slices  []*resourceapi.ResourceSlice
	version uint64
}

// Holder is one claim's hold on a device.
type Holder struct {
	Claim           types.UID
	Namespace, Name string
	// Whole is set when the claim holds the device whole; otherwise it
	// holds a share and consumes Consumed.
	Whole    bool
	Consumed []CapacityMilli
}

// NewIndex returns an empty index; consumable says whether devices can be
// shared (DRAConsumableCapacity): without it a share counts as the whole
// device, as the allocator counts it.
func NewIndex(consumable bool) *Index {
	return &Index{
		consumable: consumable,
		pools:      map[pool]*poolSlices{},
		nodes:      map[string]*nodeEntry{},
		nodePools:  map[string]map[pool]struct{}{},
		wide:       map[string]*resourceapi.ResourceSlice{},
		claims:     map[types.UID]*resourceapi.ResourceClaim{},
		holders:    map[structured.DeviceID][]Holder{},
	}
}

// Watch feeds the index from the informers of slices and claims.
func (x *Index) Watch(slices, claims cache.SharedIndexInformer) error {
	rs, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.SetSlice(nil, asSlice(obj)) },
		UpdateFunc: func(old, obj any) { x.SetSlice(asSlice(old), asSlice(obj)) },
		DeleteFunc: func(obj any) { x.SetSlice(asSlice(obj), nil) },
	})
	if err != nil {
		return err
	}
	rc, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.SetClaim(asClaim(obj)) },
		UpdateFunc: func(_, obj any) { x.SetClaim(asClaim(obj)) },
		DeleteFunc: func(obj any) {
			if c := asClaim(obj); c != nil {
				x.DeleteClaim(c.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	x.synced = []cache.InformerSynced{rs.HasSynced, rc.HasSynced}
	return nil
}

// Synced reports whether the index holds what the informers held when it
// started watching. An index that watches nothing is synced.
func (x *Index) Synced() bool {
	for _, s := range x.synced {
		if !s() {
			return false
		}
	}
	return true
}

func asSlice(obj any) *resourceapi.ResourceSlice {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, _ := obj.(*resourceapi.ResourceSlice)
	return s
}

func asClaim(obj any) *resourceapi.ResourceClaim {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	c, _ := obj.(*resourceapi.ResourceClaim)
	return c
}

// SetSlice records a slice added (old nil), changed, or deleted (obj
// nil).
func (x *Index) SetSlice(old, obj *resourceapi.ResourceSlice) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old != nil && (obj == nil || poolOf(old) != poolOf(obj)) {
		x.putSlice(poolOf(old), old.Name, nil)
	}
	if obj != nil {
		x.putSlice(poolOf(obj), obj.Name, obj)
	}
}

// putSlice sets (or with nil removes) one slice of a pool and brings the
// pool's nodes up to date. Callers hold x.mu.
func (x *Index) putSlice(p pool, name string, obj *resourceapi.ResourceSlice) {
	ps := x.pools[p]
	if ps == nil {
		if obj == nil {
			return
		}
		ps = &poolSlices{slices: map[string]*resourceapi.ResourceSlice{}}
		x.pools[p] = ps
	}
	if obj == nil {
		delete(ps.slices, name)
	} else {
		ps.slices[name] = obj
	}
	x.version++
	before := ps.nodes
	ps.newest, ps.nodes = 0, nil
	for _, s := range ps.slices {
		ps.newest = max(ps.newest, s.Spec.Pool.Generation)
	}
	for n, s := range ps.slices {
		if s.Spec.Pool.Generation < ps.newest || !nodeLocal(s) {
			delete(x.wide, n)
		} else if node := *s.Spec.NodeName; !slices.Contains(ps.nodes, node) {
			ps.nodes = append(ps.nodes, node)
		}
		if s.Spec.Pool.Generation == ps.newest && !nodeLocal(s) {
			x.wide[n] = s
		}
	}
	if obj == nil {
		delete(x.wide, name)
	}
	if len(ps.slices) == 0 {
		delete(x.pools, p)
	}
	for _, node := range before {
		if !slices.Contains(ps.nodes, node) {
			delete(x.nodePools[node], p)
			x.rebuildNode(node)
		}
	}
	for _, node := range ps.nodes {
		if x.nodePools[node] == nil {
			x.nodePools[node] = map[pool]struct{}{}
		}
		x.nodePools[node][p] = struct{}{}
		x.rebuildNode(node)
	}
}

// nodeLocal tells whether a slice's devices are all on its one node.
func nodeLocal(s *resourceapi.ResourceSlice) bool {
	return ptr.Deref(s.Spec.NodeName, "") != "" && !ptr.Deref(s.Spec.PerDeviceNodeSelection, false)
}

// rebuildNode gathers a node's current node-local slices from the pools
// on it. Callers hold x.mu.
func (x *Index) rebuildNode(node string) {
	var list []*resourceapi.ResourceSlice
	for p := range x.nodePools[node] {
		ps := x.pools[p]
		if ps == nil {
			continue
		}
		for _, s := range ps.slices {
			if s.Spec.Pool.Generation == ps.newest && nodeLocal(s) && *s.Spec.NodeName == node {
				list = append(list, s)
			}
		}
	}
	if len(list) == 0 {
		delete(x.nodes, node)
		delete(x.nodePools, node)
		return
	}
	sortLikeAllocator(list)
	x.nodes[node] = &nodeEntry{slices: list, version: x.version}
}

// SetClaim records a claim added or changed: what its allocation holds
// replaces what it held before.
func (x *Index) SetClaim(claim *resourceapi.ResourceClaim) {
	if claim == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old := x.claims[claim.UID]; old != nil {
		if old.Status.Allocation == claim.Status.Allocation {
			// Informer objects are not changed in place: the same
			// allocation holds the same devices.
			x.claims[claim.UID] = claim
			return
		}
		x.holdClaim(old, false)
	}
	x.holdClaim(claim, true)
}

// DeleteClaim forgets what a claim held.
func (x *Index) DeleteClaim(uid types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old := x.claims[uid]; old != nil {
		x.holdClaim(old, false)
	}
}

// holdClaim adds (or takes out) what a claim's allocation holds. Callers
// hold x.mu.
func (x *Index) holdClaim(claim *resourceapi.ResourceClaim, add bool) {
	alloc := claim.Status.Allocation
	if !add {
		delete(x.claims, claim.UID)
	}
	if alloc == nil {
		return
	}
	if add {
		x.claims[claim.UID] = claim
	}
	x.version++
	for _, r := range alloc.Devices.Results {
		h, ok := x.Holder(claim.UID, claim.Namespace, claim.Name, r)
		if !ok {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if add {
			x.holders[id] = append(x.holders[id], h)
		} else {
			hs := slices.DeleteFunc(x.holders[id], func(h Holder) bool { return h.Claim == claim.UID })
			if len(hs) == 0 {
				delete(x.holders, id)
			} else {
				x.holders[id] = hs
			}
		}
		if ps := x.pools[pool{r.Driver, r.Pool}]; ps != nil {
			for _, node := range ps.nodes {
				if e := x.nodes[node]; e != nil {
					x.nodes[node] = &nodeEntry{slices: e.slices, version: x.version}
				}
			}
		}
	}
}

// Holder is a claim's hold on the device of one allocation result; false
// for an admin-access result, which is not an allocation.
func (x *Index) Holder(uid types.UID, namespace, name string, r resourceapi.DeviceRequestAllocationResult) (Holder, bool) {
	if ptr.Deref(r.AdminAccess, false) {
		return Holder{}, false
	}
	h := Holder{Claim: uid, Namespace: namespace, Name: name, Whole: !x.consumable || r.ShareID == nil}
	if !h.Whole {
		for capacity, q := range r.ConsumedCapacity {
			h.Consumed = append(h.Consumed, CapacityMilli{Name: capacity, Milli: q.MilliValue()})
		}
	}
	return h, true
}

// View is the index as one reader sees it: it holds the index's read
// lock until Done.
type View struct{ x *Index }

// Read locks the index for reading; call Done on the view.
func (x *Index) Read() View {
	x.mu.RLock()
	return View{x}
}

// Done releases the view.
func (v View) Done() { v.x.mu.RUnlock() }

// Node returns the node's current node-local slices (read-only) and the
// node's version, which changes whenever they or what claims hold of
// their pools' devices change.
func (v View) Node(name string) ([]*resourceapi.ResourceSlice, uint64) {
	if e := v.x.nodes[name]; e != nil {
		return e.slices, e.version
	}
	return nil, 0
}

// Wide returns the current slices that are not node-local.
func (v View) Wide() []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, 0, len(v.x.wide))
	for _, s := range v.x.wide {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Holders returns the claims that hold a device (read-only).
func (v View) Holders(id structured.DeviceID) []Holder { return v.x.holders[id] }

// HasClaim tells whether the informer delivered the claim allocated.
func (v View) HasClaim(uid types.UID) bool { return v.x.claims[uid] != nil }

// PoolNodes returns the nodes of a pool's current node-local slices
// (read-only).
func (v View) PoolNodes(driver, name string) []string {
	if ps := v.x.pools[pool{driver, name}]; ps != nil {
		return ps.nodes
	}
	return nil
}

// NodeVersion is the node's version alone (see View.Node).
func (x *Index) NodeVersion(name string) uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if e := x.nodes[name]; e != nil {
		return e.version
	}
	return 0
}
