package devicefit

import (
	"context"
	"unique"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

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

// forgetSlice drops a deleted slice's cache.
func (p *Plugin) forgetSlice(obj any) {
	if s := asSlice(obj); s != nil {
		p.mu.Lock()
		delete(p.matches, s.Name)
		p.mu.Unlock()
	}
}
