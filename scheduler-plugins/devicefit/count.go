package devicefit

import (
	"context"
	"slices"
	"sync"
	"unique"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
)

// nodeCounts is one node's free-device counts, per alternative shape,
// as of one version of the node in the index: what an alternative finds
// on the node depends only on its shape, the node's slices and what
// claims hold of their devices, and any change to those two bumps the
// version.
type nodeCounts struct {
	mu      sync.Mutex
	version uint64
	free    map[unique.Handle[string]]int64
}

// verdict returns why the node cannot satisfy some requirement of the
// check, "" if it can.
//
// The counts come from the index as the informer delivered slices and
// claims, which can differ from what the scheduler's own claim cache
// shows (kube-scheduler's assume cache and its allocations in flight):
// claims it wrote but the informer has not delivered are added from the
// check's flying allocations; and before a node is turned away, it is
// counted again with only the holders that the claim cache still shows
// allocated, so that a device the informer has not freed yet here but
// DynamicResources sees free never turns a node away.
func (p *Plugin) verdict(ctx context.Context, c *check, node string) string {
	var buf [8]int64
	n := c.offset[len(c.reqs)]
	counts := buf[:0]
	if n > len(buf) {
		counts = make([]int64, 0, n)
	}
	counts = counts[:n]
	p.cachedCounts(ctx, c, node, counts)
	if c.flyingNodes.Has(node) {
		p.takeFlying(ctx, c, node, counts)
	}
	if i, _ := unmet(c, counts); i < 0 {
		return ""
	}
	p.countNode(ctx, c, node, counts, c.flying, p.confirmed)
	if i, have := unmet(c, counts); i >= 0 {
		return reason(c.reqs[i], have)
	}
	return ""
}

// unmet returns the first checked requirement that no alternative
// satisfies with counts, and the most devices an alternative found; -1
// when every one is satisfied.
func unmet(c *check, counts []int64) (int, int64) {
	for i, r := range c.reqs {
		if c.unchecked[i] {
			continue
		}
		var have int64
		met := false
		for j, alt := range r.alts {
			k := counts[c.offset[i]+j]
			have = max(have, k)
			met = met || k >= alt.count
		}
		if !met {
			return i, have
		}
	}
	return -1, 0
}

// cachedCounts fills counts from the node's cached counts, counting the
// node's devices only when it changed since, or for shapes not seen on
// it before.
func (p *Plugin) cachedCounts(ctx context.Context, c *check, node string, counts []int64) {
	v := p.index.NodeVersion(node)
	obj, _ := p.counts.Load(node)
	e, _ := obj.(*nodeCounts)
	if e == nil {
		obj, _ = p.counts.LoadOrStore(node, &nodeCounts{})
		e = obj.(*nodeCounts)
	}
	e.mu.Lock()
	if e.version == v && e.free != nil && p.fill(c, e.free, counts) {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	version := p.countNode(ctx, c, node, counts, nil, nil)
	e.mu.Lock()
	defer e.mu.Unlock()
	if version < e.version {
		return // another Filter counted a newer version
	}
	if version != e.version || e.free == nil || len(e.free) >= maxCachedSelections {
		e.version, e.free = version, map[unique.Handle[string]]int64{}
	}
	for i, r := range c.reqs {
		for j, alt := range r.alts {
			e.free[alt.shape] = counts[c.offset[i]+j]
		}
	}
}

// fill reads every alternative's count from cached; false if some shape
// is not there.
func (p *Plugin) fill(c *check, cached map[unique.Handle[string]]int64, counts []int64) bool {
	for i, r := range c.reqs {
		for j, alt := range r.alts {
			k, ok := cached[alt.shape]
			if !ok {
				return false
			}
			counts[c.offset[i]+j] = k
		}
	}
	return true
}

// forgetNode drops a deleted node's counts.
func (p *Plugin) forgetNode(obj any) {
	if name := nodeName(obj); name != "" {
		p.counts.Delete(name)
	}
}

// countNode counts each alternative's free devices on the node, with
// the allocations in flying added and, when confirm is set, only the
// index's holders it confirms. It returns the node's version it counted.
func (p *Plugin) countNode(ctx context.Context, c *check, node string, counts []int64, flying map[structured.DeviceID][]devicecount.Holder, confirm func(devicecount.Holder) bool) uint64 {
	clear(counts)
	var pickBuf [8]pick
	picks := pickBuf[:0]
	if len(counts) > len(pickBuf) {
		picks = make([]pick, 0, len(counts))
	}
	picks = picks[:len(counts)]
	view := p.index.Read()
	defer view.Done()
	list, version := view.Node(node)
	for _, slice := range list {
		ids := p.picks(ctx, c, slice, picks)
		for d := range slice.Spec.Devices {
			dev := &slice.Spec.Devices[d]
			held, extra := view.Holders(ids[d]), flying[ids[d]]
			for k, pk := range picks {
				if pk.sel[d] && pk.idle.fits[d] && p.free(dev, pk.idle.needs[d], held, extra, confirm) {
					counts[k]++
				}
			}
		}
	}
	if version == 0 {
		p.counts.Delete(node)
	}
	return version
}

// takeFlying takes out of the node's counts the devices that the
// check's flying allocations hold and the counts had free. Only those
// devices are looked at: the cached counts stand for the rest. (Should
// the index have changed since the counts, a device the index now holds
// is not taken out twice; the count is then too high, which only lets
// the node through to the allocator.)
func (p *Plugin) takeFlying(ctx context.Context, c *check, node string, counts []int64) {
	var pickBuf [8]pick
	picks := pickBuf[:0]
	if len(counts) > len(pickBuf) {
		picks = make([]pick, 0, len(counts))
	}
	picks = picks[:len(counts)]
	view := p.index.Read()
	defer view.Done()
	list, _ := view.Node(node)
	for _, slice := range list {
		ids := p.picks(ctx, c, slice, picks)
		for d := range slice.Spec.Devices {
			extra := c.flying[ids[d]]
			if extra == nil {
				continue
			}
			dev, held := &slice.Spec.Devices[d], view.Holders(ids[d])
			for k, pk := range picks {
				if pk.sel[d] && pk.idle.fits[d] && p.free(dev, pk.idle.needs[d], held, nil, nil) && !p.free(dev, pk.idle.needs[d], held, extra, nil) {
					counts[k]--
				}
			}
		}
	}
}

// free tells whether a device that fits an alternative when idle can
// take it now, given the claims that hold it (held, from the index, only
// those confirm accepts if set; and extra, in flight): a device used
// whole must not be held whole; a shared one must have room left for
// what the alternative consumes (needs).
func (p *Plugin) free(dev *resourceapi.Device, needs []capacityNeed, held, extra []devicecount.Holder, confirm func(devicecount.Holder) bool) bool {
	if len(held) == 0 && len(extra) == 0 {
		return true
	}
	counts := func(h devicecount.Holder) bool {
		if slices.ContainsFunc(extra, func(e devicecount.Holder) bool { return e.Claim == h.Claim }) {
			return false // counted with the allocation in flight
		}
		return confirm == nil || confirm(h)
	}
	if !p.consumable || !ptr.Deref(dev.AllowMultipleAllocations, false) {
		for _, h := range extra {
			if h.Whole {
				return false
			}
		}
		for _, h := range held {
			if h.Whole && counts(h) {
				return false
			}
		}
		return true
	}
	for _, n := range needs {
		var used int64
		consumed := false
		add := func(h devicecount.Holder) {
			for _, u := range h.Consumed {
				if u.Name == n.name {
					used += u.Milli
					consumed = true
				}
			}
		}
		for _, h := range extra {
			add(h)
		}
		for _, h := range held {
			if !h.Whole && counts(h) {
				add(h)
			}
		}
		if consumed && used+n.need > n.total {
			return false
		}
	}
	return true
}

// confirmed tells whether the scheduler's claim cache still shows the
// holder's claim allocated. An allocation is never changed, only
// removed, so any allocation of the same claim holds the device.
func (p *Plugin) confirmed(h devicecount.Holder) bool {
	claim, err := p.dra.ResourceClaims().Get(h.Namespace, h.Name)
	return err == nil && claim.UID == h.Claim && claim.Status.Allocation != nil
}
