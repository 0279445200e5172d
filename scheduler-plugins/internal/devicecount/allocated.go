package devicecount

import (
	"fmt"
	"maps"
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
// manager's GatherAllocatedState returns, kept up to date across
// scheduling cycles instead of copied whole in each one.
//
// Why: GatherAllocatedState deep-copies the consumed capacity of every
// shared device in the cluster, a map per device, for each call. At a
// thousand GPU nodes with most GPUs shared that is most of a pod's
// PreFilter time, and DynamicResources already pays it once per pod.
// Allocated instead walks the claims (pointers, no copies), redoes the
// bookkeeping only for claims whose allocation changed, and hands out a
// fresh read-only state only when something did change.
//
// What it reads is what GatherAllocatedState reads: claims as the
// scheduler's assume cache holds them (informer objects, or the version
// the scheduler wrote), and the allocations still in flight (reserved
// for a pod being bound, not yet written). Admin-access results are not
// allocations. The assume cache is updated before its event handlers run,
// DynamicResources' own bookkeeping among them, so a freed device is never
// seen here later than DynamicResources sees it.
type Allocated struct {
	dra        fwk.SharedDRAManager
	consumable bool

	mu     sync.Mutex
	claims map[types.UID]*claimAllocation
	// epoch numbers the walks over the claims, to find the claims that
	// are gone.
	epoch uint64
	// whole, shared and consumed are what the cached claims hold, kept as
	// the DRA manager keeps them: sets, and consumed capacity added and
	// subtracted. The consumed capacity of a device is never changed in
	// place: a state handed out shares those maps.
	whole    sets.Set[structured.DeviceID]
	shared   sets.Set[structured.SharedDeviceID]
	consumed structured.ConsumedCapacityCollection
	// inFlight counts the claims whose allocation is in flight; they are
	// added on top of the cached ones in each state, as the DRA manager
	// adds its in-flight allocations.
	inFlight int
	// state is the last state handed out; nil once something changed.
	state *structured.AllocatedState
}

// claimAllocation is the allocation a claim was last seen with.
type claimAllocation struct {
	result *resourceapi.AllocationResult
	// pending is set when the allocation is in flight, not in the claim.
	pending bool
	epoch   uint64
}

// NewAllocated returns the tracker of a DRA manager's claims; consumable
// says whether devices can be shared (DRAConsumableCapacity), as the
// allocator is told.
func NewAllocated(dra fwk.SharedDRAManager, consumable bool) *Allocated {
	return &Allocated{
		dra:        dra,
		consumable: consumable,
		claims:     map[types.UID]*claimAllocation{},
		whole:      sets.New[structured.DeviceID](),
		shared:     sets.New[structured.SharedDeviceID](),
		consumed:   structured.ConsumedCapacityCollection{},
	}
}

// State returns the current allocated state. The caller must not change
// it; it stays as it is when later claims change.
func (a *Allocated) State() (*structured.AllocatedState, error) {
	claims, err := a.dra.ResourceClaims().List()
	if err != nil {
		return nil, fmt.Errorf("list ResourceClaims: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.epoch++
	touched := 0
	for _, claim := range claims {
		result, pending := claim.Status.Allocation, false
		if result == nil {
			result = a.dra.ResourceClaims().GetPendingAllocation(claim.UID)
			pending = result != nil
		}
		seen := a.claims[claim.UID]
		switch {
		case seen == nil && result == nil:
			continue
		case seen == nil:
			seen = &claimAllocation{}
			a.claims[claim.UID] = seen
		case result == nil:
			// Deallocated, or its allocation was given up.
			a.forget(seen)
			delete(a.claims, claim.UID)
			continue
		}
		seen.epoch = a.epoch
		touched++
		if seen.result != result || seen.pending != pending {
			a.forget(seen)
			seen.result, seen.pending = result, pending
			a.record(seen)
		}
	}
	if touched < len(a.claims) {
		// Some claims are gone.
		for uid, seen := range a.claims {
			if seen.epoch != a.epoch {
				a.forget(seen)
				delete(a.claims, uid)
			}
		}
	}
	if a.state == nil {
		a.state = a.snapshot()
	}
	return a.state, nil
}

// record adds a claim's allocation to the state, forget takes it out.
func (a *Allocated) record(c *claimAllocation) {
	a.state = nil
	if c.pending {
		a.inFlight++
		return
	}
	a.apply(c.result, a.whole, a.shared, a.consumed, true)
}

func (a *Allocated) forget(c *claimAllocation) {
	if c.result == nil {
		return
	}
	a.state = nil
	if c.pending {
		a.inFlight--
		return
	}
	a.apply(c.result, a.whole, a.shared, a.consumed, false)
}

// snapshot copies the cached claims' state and adds the allocations in
// flight.
func (a *Allocated) snapshot() *structured.AllocatedState {
	s := &structured.AllocatedState{
		AllocatedDevices:         maps.Clone(a.whole),
		AllocatedSharedDeviceIDs: maps.Clone(a.shared),
		AggregatedCapacity:       maps.Clone(a.consumed),
	}
	if a.inFlight == 0 {
		return s
	}
	for _, c := range a.claims {
		if c.pending {
			a.apply(c.result, s.AllocatedDevices, s.AllocatedSharedDeviceIDs, s.AggregatedCapacity, true)
		}
	}
	return s
}

// apply adds (or removes) an allocation's devices, as the DRA manager's
// bookkeeping does. Admin-access results are not allocations.
func (a *Allocated) apply(result *resourceapi.AllocationResult, whole sets.Set[structured.DeviceID], shared sets.Set[structured.SharedDeviceID], consumed structured.ConsumedCapacityCollection, add bool) {
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
		if !add && used.Empty() {
			delete(consumed, id)
		} else {
			consumed[id] = used
		}
	}
}
