package replay

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"
)

// draManager is kube-scheduler's DRA manager with one method answered
// differently: GatherAllocatedState, which DynamicResources calls in
// every PreFilter for the allocator, reads a record of the allocated
// devices that the replay keeps from the same assume cache's events,
// instead of kube-scheduler's.
//
// Why: kube-scheduler 1.37 copies the whole allocated state for every
// pod, the consumed capacity of each shared device deep-copied (a map
// and a Quantity per capacity); at a thousand GPU nodes with shares that
// copy is a quarter of a replayed pod's CPU. Here the state handed out
// is read-only and shared until a claim changes, and a change costs a
// shallow copy of the sets; the per-device consumed capacity is never
// changed in place, so states handed out earlier stay as they were.
//
// The state holds the same devices, shares and consumed capacity as
// kube-scheduler's, with one thing left out: the ID of a share whose
// device has consumed capacity recorded. The 1.37 allocator asks the set
// of share IDs only whether some share of a device is allocated, after
// or alongside asking AggregatedCapacity the same, and answers by
// scanning the whole set for every idle shared device it considers
// (kubernetes/kubernetes#142014 makes that a lookup in 1.38); every
// answer is the same without those IDs, which are all of them when
// shares ask for capacity. The replay's tests check that placements are
// the same with kube-scheduler's manager.
//
// Allocations in flight (reserved, not yet written) are added by
// kube-scheduler's manager: while any is, the state is its copy, with
// the same IDs left out. The replay writes each pod's claim before the
// next pod's PreFilter, so that happens only if a scheduler error leaves
// one behind.
type draManager struct {
	fwk.SharedDRAManager
	claims *claimTracker
}

// newDRAManager wraps kube-scheduler's manager over the assume cache of
// claims it reads.
func newDRAManager(upstream fwk.SharedDRAManager, claimCache *assumecache.AssumeCache) *draManager {
	t := &claimTracker{
		ResourceClaimTracker: upstream.ResourceClaims(),
		inFlight:             sets.New[types.UID](),
		whole:                map[structured.DeviceID]int{},
		shares:               map[structured.DeviceID]sets.Set[structured.SharedDeviceID]{},
		consumed:             structured.ConsumedCapacityCollection{},
		bare:                 sets.New[structured.SharedDeviceID](),
	}
	claimCache.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.change(nil, obj) },
		UpdateFunc: t.change,
		DeleteFunc: func(obj any) { t.change(obj, nil) },
	})
	return &draManager{SharedDRAManager: upstream, claims: t}
}

// ResourceClaims implements fwk.SharedDRAManager.
func (m *draManager) ResourceClaims() fwk.ResourceClaimTracker { return m.claims }

// claimTracker is kube-scheduler's claim tracker with the replay's
// GatherAllocatedState.
type claimTracker struct {
	fwk.ResourceClaimTracker

	mu sync.Mutex
	// inFlight holds the claims whose allocation is in flight.
	inFlight sets.Set[types.UID]
	// whole counts the claims holding each device whole (one, unless
	// something is wrong; counted so that a release cannot take a device
	// from another holder).
	whole map[structured.DeviceID]int
	// shares holds the allocated shares of each device, consumed what
	// they consume (each device's map replaced, never changed in place),
	// and bare the shares of devices without consumed capacity.
	shares   map[structured.DeviceID]sets.Set[structured.SharedDeviceID]
	consumed structured.ConsumedCapacityCollection
	bare     sets.Set[structured.SharedDeviceID]
	// state is the last state handed out; nil once something changed.
	state *structured.AllocatedState
}

// SignalClaimPendingAllocation implements fwk.ResourceClaimTracker.
func (t *claimTracker) SignalClaimPendingAllocation(uid types.UID, claim *resourceapi.ResourceClaim) error {
	if err := t.ResourceClaimTracker.SignalClaimPendingAllocation(uid, claim); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight.Insert(uid)
	return nil
}

// MaybeRemoveClaimPendingAllocation implements fwk.ResourceClaimTracker.
func (t *claimTracker) MaybeRemoveClaimPendingAllocation(uid types.UID, force bool) bool {
	deleted := t.ResourceClaimTracker.MaybeRemoveClaimPendingAllocation(uid, force)
	if deleted {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.inFlight.Delete(uid)
	}
	return deleted
}

// GatherAllocatedState implements fwk.ResourceClaimTracker. The caller
// must not change the state.
func (t *claimTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.inFlight) > 0 {
		s, err := t.ResourceClaimTracker.GatherAllocatedState()
		if err != nil {
			return nil, err
		}
		for id := range s.AllocatedSharedDeviceIDs {
			if _, ok := s.AggregatedCapacity[id.GetDeviceID()]; ok {
				s.AllocatedSharedDeviceIDs.Delete(id)
			}
		}
		return s, nil
	}
	if t.state == nil {
		whole := make(sets.Set[structured.DeviceID], len(t.whole))
		for id := range t.whole {
			whole.Insert(id)
		}
		consumed := make(structured.ConsumedCapacityCollection, len(t.consumed))
		for id, c := range t.consumed {
			consumed[id] = c
		}
		t.state = &structured.AllocatedState{
			AllocatedDevices:         whole,
			AllocatedSharedDeviceIDs: t.bare.Clone(),
			AggregatedCapacity:       consumed,
		}
	}
	return t.state, nil
}

// change brings the record up to date with a claim's change, as
// kube-scheduler's bookkeeping does: an allocation counts from when the
// claim has one until it has none or is gone (allocations are never
// changed, only set and cleared).
func (t *claimTracker) change(oldObj, newObj any) {
	oldAlloc, newAlloc := allocationOf(oldObj), allocationOf(newObj)
	if (oldAlloc == nil) == (newAlloc == nil) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state = nil
	if oldAlloc != nil {
		t.apply(oldAlloc, false)
	} else {
		t.apply(newAlloc, true)
	}
}

// allocationOf returns a claim's allocation; a deleted claim's last
// known state counts.
func allocationOf(obj any) *resourceapi.AllocationResult {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok || claim == nil {
		return nil
	}
	return claim.Status.Allocation
}

// apply adds (or takes out) an allocation's devices. Admin-access
// results hold nothing; a result with a share ID is a share, whatever
// it consumes.
func (t *claimTracker) apply(alloc *resourceapi.AllocationResult, add bool) {
	for _, r := range alloc.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			if add {
				t.whole[id]++
			} else if t.whole[id]--; t.whole[id] <= 0 {
				delete(t.whole, id)
			}
			continue
		}
		share := structured.MakeSharedDeviceID(id, r.ShareID)
		// The device's shares leave bare and come back if it has no
		// consumed capacity once this one is counted.
		t.bare.Delete(t.shares[id].UnsortedList()...)
		if add {
			if t.shares[id] == nil {
				t.shares[id] = sets.New[structured.SharedDeviceID]()
			}
			t.shares[id].Insert(share)
		} else if t.shares[id].Delete(share); len(t.shares[id]) == 0 {
			delete(t.shares, id)
		}
		if r.ConsumedCapacity != nil {
			t.consume(id, r.ConsumedCapacity, add)
		}
		if _, ok := t.consumed[id]; !ok {
			t.bare.Insert(t.shares[id].UnsortedList()...)
		}
	}
}

// consume adds (or subtracts) what a share consumes of a device, as
// kube-scheduler's ConsumedCapacityCollection does: a device whose
// consumed capacity comes to nothing has no entry. The device's map is
// replaced, so that states handed out keep theirs.
func (t *claimTracker) consume(id structured.DeviceID, used map[resourceapi.QualifiedName]resource.Quantity, add bool) {
	c := structured.NewDeviceConsumedCapacity(id, used)
	old, ok := t.consumed[id]
	switch {
	case add && !ok:
		t.consumed[id] = c.ConsumedCapacity.Clone()
	case add:
		next := old.Clone()
		next.Add(c.ConsumedCapacity)
		t.consumed[id] = next
	case ok:
		next := old.Clone()
		next.Sub(c.ConsumedCapacity)
		if next.Empty() {
			delete(t.consumed, id)
		} else {
			t.consumed[id] = next
		}
	}
}

// SharesAllocatedState tells Strata's plugins that GatherAllocatedState
// hands out a shared state that later changes do not alter, so that they
// read it rather than keep their own.
func (t *claimTracker) SharesAllocatedState() bool { return true }
