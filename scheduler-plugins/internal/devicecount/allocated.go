package devicecount

import (
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// Allocated keeps what every claim the scheduler knows holds: the
// devices allocated to claims, the shares of devices that allow several
// allocations, and what those shares consume. It is the state the DRA
// manager's GatherAllocatedState returns.
//
// It gets that state one of two ways, whichever costs less on the
// cluster as it is:
//
//   - It copies it from the DRA manager. The manager keeps the sets of
//     devices up to date itself, so the copy is cheap, except for the
//     consumed capacity of shared devices: a map per device, deep-copied
//     on every call.
//   - It walks the claims (pointers, no copies), redoes the bookkeeping
//     only for claims whose allocation changed, and hands out a fresh
//     read-only state only when something did change. The walk costs a
//     little per claim, changed or not.
//
// So it walks where shared devices with consumed capacity are many and
// a fair share of what is held (at a thousand GPU nodes with most GPUs
// shared, the copy is most of a pod's PreFilter time, and DynamicResources
// already pays it once per pod), and copies otherwise: on a cluster of
// whole devices the walk would cost more than the copy it saves.
//
// What a walk reads is what GatherAllocatedState reads: claims as the
// scheduler's assume cache holds them (informer objects, or the version
// the scheduler wrote), and the allocations still in flight (reserved
// for a pod being bound, not yet written). Admin-access results are not
// allocations. The assume cache is updated before its event handlers run,
// DynamicResources' own bookkeeping among them, so a freed device is never
// seen here later than DynamicResources sees it.
type Allocated struct {
	dra        fwk.SharedDRAManager
	consumable bool

	mu sync.Mutex
	// walking says that the state comes from walking the claims, not
	// from the DRA manager's copy; walkFrom is how many shared devices
	// with consumed capacity it takes to start walking (see wantWalk).
	walking  bool
	walkFrom int
	// claims holds the claims that hold devices, by UID; objects holds
	// the same claim objects, so that an unchanged claim is found by its
	// pointer (informer objects are never changed in place) without
	// reading its UID.
	claims  map[types.UID]claimAllocation
	objects map[*resourceapi.ResourceClaim]struct{}
	// whole, shared and consumed are what the claims' own allocations
	// hold, kept as the DRA manager keeps them: sets, and consumed
	// capacity added and subtracted. The consumed capacity of a device is
	// never changed in place: a state handed out shares those maps.
	whole    sets.Set[structured.DeviceID]
	shared   sets.Set[structured.SharedDeviceID]
	consumed structured.ConsumedCapacityCollection
	// milli is consumed in milli-units, per device, for Snapshot.Milli;
	// names interns the capacities' names.
	milli map[structured.DeviceID][]CapacityMilli
	names map[resourceapi.QualifiedName]resourceapi.QualifiedName
	// inFlight holds the allocations in flight, by claim; they are added
	// on top of the others in each state, as the DRA manager adds its
	// in-flight allocations.
	inFlight map[types.UID]*resourceapi.AllocationResult
	// state is the last state handed out; nil once something changed.
	state *Snapshot
}

// Snapshot is the allocated state at one time, as GatherAllocatedState
// returns it, with what claims consume of each device also laid out in
// milli-units for quick reading.
type Snapshot struct {
	*structured.AllocatedState
	// Milli holds, per device in AggregatedCapacity, what its claims
	// consume of each capacity.
	Milli map[structured.DeviceID][]CapacityMilli
}

// ConsumedMilli returns what claims consume of one capacity of a device,
// in milli-units; ok is false when they consume none of it.
func (s *Snapshot) ConsumedMilli(id structured.DeviceID, name resourceapi.QualifiedName) (milli int64, ok bool) {
	for _, u := range s.Milli[id] {
		if u.Name == name {
			return u.Milli, true
		}
	}
	return 0, false
}

// CapacityMilli is an amount of one capacity, in milli-units.
type CapacityMilli struct {
	Name  resourceapi.QualifiedName
	Milli int64
}

// claimAllocation is a claim that holds devices, as last seen.
type claimAllocation struct {
	claim  *resourceapi.ResourceClaim
	result *resourceapi.AllocationResult
	// pending is set when the allocation is in flight, not in the claim.
	pending bool
}

// NewAllocated returns the tracker of a DRA manager's claims; consumable
// says whether devices can be shared (DRAConsumableCapacity), as the
// allocator is told.
func NewAllocated(dra fwk.SharedDRAManager, consumable bool) *Allocated {
	a := &Allocated{
		dra:        dra,
		consumable: consumable,
		walkFrom:   walkFrom,
		names:      map[resourceapi.QualifiedName]resourceapi.QualifiedName{},
	}
	a.forgetClaims()
	return a
}

// walkFrom is how many shared devices with consumed capacity it takes
// for the tracker to walk the claims: below it, the DRA manager's copy
// costs a few microseconds whatever the cluster.
const walkFrom = 32

// State returns the current allocated state. The caller must not change
// it; it stays as it is when later claims change.
func (a *Allocated) State() (*Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.dra.ResourceClaims().(stateSharer); ok && t.SharesAllocatedState() {
		return a.sharedState()
	}
	if !a.walking {
		s, err := a.copied()
		if err != nil || !a.wantWalk(s.AllocatedState) {
			return s, err
		}
		a.walking = true
	}
	s, err := a.walk()
	if err == nil && !a.wantWalk(s.AllocatedState) {
		a.stopWalking()
	}
	return s, err
}

// wantWalk says whether walking the claims is cheaper than copying the
// DRA manager's state, judged from the last state. A copy costs most for
// each shared device with consumed capacity (a map deep-copied, about a
// microsecond), a walk a little for every claim (a lookup, about a sixth
// of that); held devices and shares stand for the claims. The bar to
// stop walking is lower than the one to start, so that a cluster near
// the bar does not switch, and start the walk from nothing, every cycle.
func (a *Allocated) wantWalk(s *structured.AllocatedState) bool {
	shared := len(s.AggregatedCapacity)
	held := len(s.AllocatedDevices) + len(s.AllocatedSharedDeviceIDs)
	if a.walking {
		return shared >= a.walkFrom/2 && 8*shared >= held
	}
	return shared >= a.walkFrom && 4*shared >= held
}

// stateSharer is a DRA manager's claim tracker whose GatherAllocatedState
// keeps its state up to date as claims change and hands out one
// read-only state until the next change, instead of copying it per call
// as kube-scheduler's does (strata-sim's replay has such a manager).
// Reading its state costs nothing, so the tracker neither walks the
// claims nor works out a state twice.
type stateSharer interface {
	// SharesAllocatedState says whether GatherAllocatedState hands out
	// a shared state that no later change alters.
	SharesAllocatedState() bool
}

// sharedState returns the state of a stateSharer's manager with its
// consumed capacity laid out in milli-units. Such a manager never has
// the tracker walk, so state and milli are only ever set here, and milli
// is what the last state consumes.
//
// The manager replaces a device's consumed capacity when it changes,
// never changing it in place, so that only devices whose map is not the
// one seen last need to be laid out again: a claim changes a device or
// two, and a cluster of shared GPUs has thousands.
func (a *Allocated) sharedState() (*Snapshot, error) {
	s, err := a.gather()
	if err != nil {
		return nil, err
	}
	if a.state != nil && a.state.AllocatedState == s {
		return a.state, nil
	}
	var prev structured.ConsumedCapacityCollection
	if a.state != nil {
		prev = a.state.AggregatedCapacity
	}
	changed := len(s.AggregatedCapacity) != len(prev)
	for id, used := range s.AggregatedCapacity {
		if old, ok := prev[id]; ok && sameMap(old, used) {
			continue
		}
		changed = true
		if used.Empty() {
			delete(a.milli, id)
		} else {
			a.milli[id] = a.inMilli(used)
		}
	}
	if len(a.milli) > len(s.AggregatedCapacity) {
		for id := range a.milli {
			if _, ok := s.AggregatedCapacity[id]; !ok {
				delete(a.milli, id)
			}
		}
	}
	if changed || a.state == nil {
		a.state = &Snapshot{AllocatedState: s, Milli: maps.Clone(a.milli)}
	} else {
		a.state = &Snapshot{AllocatedState: s, Milli: a.state.Milli}
	}
	return a.state, nil
}

// sameMap tells whether two consumed capacities are the same map.
func sameMap(a, b structured.ConsumedCapacity) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// copied returns the DRA manager's copy of the state.
func (a *Allocated) copied() (*Snapshot, error) {
	s, err := a.gather()
	if err != nil {
		return nil, err
	}
	out := &Snapshot{AllocatedState: s, Milli: make(map[structured.DeviceID][]CapacityMilli, len(s.AggregatedCapacity))}
	for id, used := range s.AggregatedCapacity {
		if !used.Empty() {
			out.Milli[id] = a.inMilli(used)
		}
	}
	return out, nil
}

// gather reads the DRA manager's state. The manager refuses a state that
// a concurrent change made inconsistent; that is rare, and a later try,
// once the change's handler has run, succeeds.
func (a *Allocated) gather() (*structured.AllocatedState, error) {
	var s *structured.AllocatedState
	var err error
	for range 100 {
		if s, err = a.dra.ResourceClaims().GatherAllocatedState(); err == nil {
			return s, nil
		}
		runtime.Gosched()
	}
	return nil, fmt.Errorf("gather the allocated devices: %w", err)
}

// stopWalking forgets the claims; a later walk starts from nothing.
func (a *Allocated) stopWalking() {
	a.walking = false
	a.forgetClaims()
}

// forgetClaims empties the walk's bookkeeping. A state handed out keeps
// the maps it was copied from, so they are replaced, not cleared.
func (a *Allocated) forgetClaims() {
	a.state = nil
	a.claims = map[types.UID]claimAllocation{}
	a.objects = map[*resourceapi.ResourceClaim]struct{}{}
	a.inFlight = map[types.UID]*resourceapi.AllocationResult{}
	a.whole = sets.New[structured.DeviceID]()
	a.shared = sets.New[structured.SharedDeviceID]()
	a.consumed = structured.ConsumedCapacityCollection{}
	a.milli = map[structured.DeviceID][]CapacityMilli{}
}

// walk brings the state up to date with the claims and returns it.
//
// It takes out every allocation that ended before it adds any new one: a
// device freed by one claim and given whole to another since the last
// walk is a set entry that the release would otherwise delete after the
// new holder inserted it. The DRA manager sees the two in the order they
// happened, which is always release first.
func (a *Allocated) walk() (*Snapshot, error) {
	claims, err := a.dra.ResourceClaims().List()
	if err != nil {
		return nil, fmt.Errorf("list ResourceClaims: %w", err)
	}
	// kept counts the claims recorded before that are unchanged; fewer
	// than are left recorded after the changed ones are forgotten means
	// some claims are gone.
	kept := 0
	var added []claimAllocation
	for _, claim := range claims {
		result, pending := claim.Status.Allocation, false
		if result != nil {
			if _, same := a.objects[claim]; same {
				kept++
				continue
			}
		} else {
			result = a.dra.ResourceClaims().GetPendingAllocation(claim.UID)
			pending = result != nil
		}
		seen, ok := a.claims[claim.UID]
		switch {
		case !ok && result == nil:
			continue
		case ok && pending && seen.pending && seen.result == result:
			// Still in flight.
			kept++
			continue
		case ok:
			a.forget(seen)
		}
		if result != nil {
			added = append(added, claimAllocation{claim: claim, result: result, pending: pending})
		}
	}
	if kept < len(a.claims) {
		present := make(sets.Set[types.UID], len(claims))
		for _, claim := range claims {
			present.Insert(claim.UID)
		}
		for uid, seen := range a.claims {
			if !present.Has(uid) {
				a.forget(seen)
			}
		}
	}
	for _, c := range added {
		a.record(c)
	}
	if a.state == nil {
		a.state = a.snapshot()
	}
	return a.state, nil
}

// record adds a claim's allocation to the state, forget takes it out.
func (a *Allocated) record(c claimAllocation) {
	a.state = nil
	a.claims[c.claim.UID] = c
	if c.pending {
		a.inFlight[c.claim.UID] = c.result
		return
	}
	a.objects[c.claim] = struct{}{}
	a.apply(c.result, a.whole, a.shared, a.consumed, a.milli, true)
}

func (a *Allocated) forget(c claimAllocation) {
	a.state = nil
	delete(a.claims, c.claim.UID)
	if c.pending {
		delete(a.inFlight, c.claim.UID)
		return
	}
	delete(a.objects, c.claim)
	a.apply(c.result, a.whole, a.shared, a.consumed, a.milli, false)
}

// snapshot copies the cached claims' state and adds the allocations in
// flight.
func (a *Allocated) snapshot() *Snapshot {
	s := &Snapshot{
		AllocatedState: &structured.AllocatedState{
			AllocatedDevices:         maps.Clone(a.whole),
			AllocatedSharedDeviceIDs: maps.Clone(a.shared),
			AggregatedCapacity:       maps.Clone(a.consumed),
		},
		Milli: maps.Clone(a.milli),
	}
	for _, result := range a.inFlight {
		a.apply(result, s.AllocatedDevices, s.AllocatedSharedDeviceIDs, s.AggregatedCapacity, s.Milli, true)
	}
	return s
}

// apply adds (or removes) an allocation's devices, as the DRA manager's
// bookkeeping does. Admin-access results are not allocations.
func (a *Allocated) apply(result *resourceapi.AllocationResult, whole sets.Set[structured.DeviceID], shared sets.Set[structured.SharedDeviceID], consumed structured.ConsumedCapacityCollection, milli map[structured.DeviceID][]CapacityMilli, add bool) {
	for _, r := range result.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if !a.consumable || r.ShareID == nil {
			if add {
				whole.Insert(id)
			} else {
				whole.Delete(id)
			}
			continue
		}
		share := structured.MakeSharedDeviceID(id, r.ShareID)
		if add {
			shared.Insert(share)
		} else {
			shared.Delete(share)
		}
		if r.ConsumedCapacity == nil {
			continue
		}
		// A new map for the device: handed-out states keep the old one.
		used := consumed[id].Clone()
		change := structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity).ConsumedCapacity
		if add {
			used.Add(change)
		} else {
			used.Sub(change)
		}
		if used.Empty() {
			// Nothing consumed, as if no entry: the DRA manager keeps or
			// drops such an entry depending on the order of events.
			delete(consumed, id)
			delete(milli, id)
		} else {
			consumed[id] = used
			milli[id] = a.inMilli(used)
		}
	}
}

// inMilli lays a device's consumed capacity out in milli-units, its
// names interned.
func (a *Allocated) inMilli(used structured.ConsumedCapacity) []CapacityMilli {
	out := make([]CapacityMilli, 0, len(used))
	for name, q := range used {
		n, ok := a.names[name]
		if !ok {
			n = name
			a.names[name] = n
		}
		out = append(out, CapacityMilli{Name: n, Milli: q.MilliValue()})
	}
	return out
}
