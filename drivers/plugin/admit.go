package plugin

import (
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// OverCommitReason is the reason of the event a refused prepare posts on
// its claim.
const OverCommitReason = "DeviceOverCommitted"

// OverCommitError is a prepare refused because the claim's devices, added
// to every claim the checkpoint holds, would be more than the node has.
// Nothing was touched: the kubelet retries and the pod waits until the
// other claim is gone or the claim is allocated again.
type OverCommitError struct {
	// Device is the device (or counter set) that would be over-committed.
	Device string
	// Reason says what would be exceeded and by which claims.
	Reason string
}

func (e *OverCommitError) Error() string {
	return fmt.Sprintf("refusing to over-commit %s: %s; the allocation conflicts with what this node has prepared (two schedulers allocating from one pool?)", e.Device, e.Reason)
}

// holder is one claim's use of one device.
type holder struct {
	claim    ClaimRef
	shared   bool
	consumed map[resourceapi.QualifiedName]string
}

// admitLocked refuses a claim whose devices would over-commit the node,
// counted over every claim the checkpoint holds, in whatever phase, as
// kube-scheduler's allocator counts them:
//   - a device that does not allow multiple allocations is prepared for
//     one claim at a time;
//   - a device that allows multiple allocations holds as many claims as
//     its capacities allow: the capacity each claim consumes, summed per
//     capacity, is at most the device's;
//   - the counters that devices in use consume, each device counted once
//     however many claims share it, are at most their counter set's.
//
// Results with admin access consume nothing and are not counted. Devices
// the node does not publish (any more) are left to the backend, which
// fails on them. A claim prepared by an earlier version of the plugin that
// did not record consumed capacity counts as consuming none.
//
// This is the node's own check, not the scheduler's: it holds whichever
// scheduler, or how many, allocated the claims.
func (d *Driver) admitLocked(claim *resourceapi.ResourceClaim, allocated []AllocatedDevice) error {
	devices := make(map[string]*resourceapi.Device, len(d.inventory.Devices))
	for i := range d.inventory.Devices {
		devices[d.inventory.Devices[i].Name] = &d.inventory.Devices[i]
	}
	holders := map[string][]holder{}
	uids := make([]types.UID, 0, len(d.state.Claims))
	for uid := range d.state.Claims {
		if uid != claim.UID {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, uid := range uids {
		other := d.state.Claims[uid]
		for _, p := range other.Devices {
			if p.AdminAccess {
				continue
			}
			holders[p.Device] = append(holders[p.Device], holder{claim: other.ClaimRef, shared: p.ShareID != nil, consumed: p.ConsumedCapacity})
		}
	}
	self := ClaimRefOf(claim)
	mine := map[string]bool{}
	for _, a := range allocated {
		if a.AdminAccess {
			continue
		}
		dev := devices[a.Device]
		if dev == nil {
			continue
		}
		multiple := dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
		if !multiple || a.ShareID == nil {
			if h := holders[a.Device]; len(h) > 0 {
				return &OverCommitError{Device: "device " + a.Device, Reason: "it is already prepared for claim " + h[0].claim.String()}
			}
		}
		for _, h := range holders[a.Device] {
			if !h.shared {
				return &OverCommitError{Device: "device " + a.Device, Reason: "it is already prepared for claim " + h.claim.String() + " without sharing"}
			}
		}
		holders[a.Device] = append(holders[a.Device], holder{claim: self, shared: a.ShareID != nil, consumed: a.ConsumedCapacity})
		mine[a.Device] = true
		if multiple {
			if err := checkCapacity(dev, holders[a.Device]); err != nil {
				return err
			}
		}
	}
	return d.checkCountersLocked(devices, holders, mine)
}

// checkCapacity sums, per capacity of dev, what its holders consume.
func checkCapacity(dev *resourceapi.Device, hs []holder) error {
	names := make([]string, 0, len(dev.Capacity))
	for name := range dev.Capacity {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		limit := dev.Capacity[resourceapi.QualifiedName(name)].Value
		var sum resource.Quantity
		var parts []string
		for _, h := range hs {
			s, ok := h.consumed[resourceapi.QualifiedName(name)]
			if !ok {
				continue
			}
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return fmt.Errorf("claim %s: consumed capacity %s of device %s: %w", h.claim, name, dev.Name, err)
			}
			sum.Add(q)
			parts = append(parts, fmt.Sprintf("%s by %s", q.String(), h.claim))
		}
		if sum.Cmp(limit) > 0 {
			return &OverCommitError{Device: "device " + dev.Name,
				Reason: fmt.Sprintf("capacity %s is %s, the claims on it would consume %s (%s)", name, limit.String(), sum.String(), strings.Join(parts, ", "))}
		}
	}
	return nil
}

// checkCountersLocked sums the counters consumed by the devices in use,
// each once, per counter set that one of the claim's devices (mine)
// consumes from.
func (d *Driver) checkCountersLocked(devices map[string]*resourceapi.Device, holders map[string][]holder, mine map[string]bool) error {
	touched := map[string]bool{}
	for name := range mine {
		for _, c := range devices[name].ConsumesCounters {
			touched[c.CounterSet] = true
		}
	}
	if len(touched) == 0 {
		return nil
	}
	inUse := make([]string, 0, len(holders))
	for name := range holders {
		if devices[name] != nil {
			inUse = append(inUse, name)
		}
	}
	sort.Strings(inUse)
	for _, set := range d.inventory.SharedCounters {
		if !touched[set.Name] {
			continue
		}
		counterNames := make([]string, 0, len(set.Counters))
		for name := range set.Counters {
			counterNames = append(counterNames, name)
		}
		sort.Strings(counterNames)
		for _, counter := range counterNames {
			var sum resource.Quantity
			var users []string
			for _, name := range inUse {
				for _, c := range devices[name].ConsumesCounters {
					if c.CounterSet != set.Name {
						continue
					}
					if q, ok := c.Counters[counter]; ok {
						sum.Add(q.Value)
						users = append(users, name)
					}
				}
			}
			limit := set.Counters[counter].Value
			if sum.Cmp(limit) > 0 {
				return &OverCommitError{Device: "counter set " + set.Name,
					Reason: fmt.Sprintf("counter %s is %s, the devices in use would consume %s (%s)", counter, limit.String(), sum.String(), strings.Join(users, ", "))}
			}
		}
	}
	return nil
}
