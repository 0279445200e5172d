// Package preemption holds the pure part of job-level preemption: choosing
// which victim jobs to evict so that a whole gang fits, with the least
// damage. Feasibility is an oracle supplied by the caller (the scheduler
// plugin simulates the evictions, DRA devices included, and runs the
// topology placement); this package only decides which sets to ask about.
package preemption

import (
	"fmt"
	"slices"
	"sort"
)

// Unit is one victim job: a gang (all its pods) or a lone pod. Evicting one
// member of a gang kills the job, so a gang is evicted whole or not at all.
type Unit struct {
	ID       string
	Priority int32
	Pods     int
	// GPUs counts the accelerator devices the unit's claims hold.
	GPUs int
	// PDBViolations is how many PodDisruptionBudgets evicting the unit
	// would break.
	PDBViolations int
}

// Cost ranks a set of victims; lower is less damage. Fields compare in
// order: PodDisruptionBudgets broken, the highest victim priority, jobs
// evicted, devices evicted, pods evicted.
type Cost struct {
	PDBViolations int
	MaxPriority   int32
	Jobs          int
	GPUs          int
	Pods          int
}

// Less orders costs.
func (c Cost) Less(o Cost) bool {
	switch {
	case c.PDBViolations != o.PDBViolations:
		return c.PDBViolations < o.PDBViolations
	case c.MaxPriority != o.MaxPriority:
		return c.MaxPriority < o.MaxPriority
	case c.Jobs != o.Jobs:
		return c.Jobs < o.Jobs
	case c.GPUs != o.GPUs:
		return c.GPUs < o.GPUs
	default:
		return c.Pods < o.Pods
	}
}

func (c Cost) String() string {
	return fmt.Sprintf("%d jobs, %d pods, %d GPUs, highest priority %d, %d PDB violations", c.Jobs, c.Pods, c.GPUs, c.MaxPriority, c.PDBViolations)
}

// CostOf sums up a set of units.
func CostOf(units []Unit, set []int) Cost {
	c := Cost{MaxPriority: -1 << 31}
	for _, i := range set {
		u := units[i]
		c.PDBViolations += u.PDBViolations
		c.MaxPriority = max(c.MaxPriority, u.Priority)
		c.Jobs++
		c.GPUs += u.GPUs
		c.Pods += u.Pods
	}
	if len(set) == 0 {
		c.MaxPriority = 0
	}
	return c
}

// Feasible reports whether the gang fits once the units at the given
// indexes are evicted. It must be monotone: adding victims never turns a
// feasible set infeasible.
type Feasible func(evict []int) (bool, error)

// Choose finds a cheap victim set, deciding the cost criteria in order:
//
//  1. PodDisruptionBudgets: units that break none are used first; units
//     that break one are added only if the others cannot make room, and
//     are reprieved again where possible.
//  2. Priority: the lowest priority p such that the units up to p (plus
//     any PDB-breaking ones kept in step 1) make room.
//  3. Jobs, devices, pods: among those, the shortest prefix of the units
//     freeing the most devices first (doubling, then binary search), then
//     every victim that turns out unnecessary is reprieved, most damaging
//     first.
//
// It asks the oracle O(log n + k) times for k victims. ok is false when
// even evicting every unit does not make room.
func Choose(units []Unit, feasible Feasible) (set []int, ok bool, err error) {
	feasible = memoized(feasible)
	if ok, err := feasible(nil); err != nil || ok {
		return nil, ok, err
	}
	var free, protected []int
	for i, u := range units {
		if u.PDBViolations > 0 {
			protected = append(protected, i)
		} else {
			free = append(free, i)
		}
	}
	byDamage := func(idx []int) {
		sort.SliceStable(idx, func(a, b int) bool {
			x, y := units[idx[a]], units[idx[b]]
			if x.Priority != y.Priority {
				return x.Priority < y.Priority
			}
			if x.GPUs != y.GPUs {
				return x.GPUs > y.GPUs
			}
			if x.Pods != y.Pods {
				return x.Pods < y.Pods
			}
			return x.ID < y.ID
		})
	}
	byDamage(free)
	// Fewest PDB-breaking units: the ones freeing the most devices first.
	sort.SliceStable(protected, func(a, b int) bool {
		x, y := units[protected[a]], units[protected[b]]
		if x.GPUs != y.GPUs {
			return x.GPUs > y.GPUs
		}
		return x.Priority < y.Priority
	})

	// pdbUnits picks, with every free unit up to priority p available, the
	// PDB-breaking units (up to p) needed: none if the free ones suffice,
	// else the fewest by a greedy cover (most devices first) and reprieve.
	pdbUnits := func(p int32) ([]int, bool, error) {
		var freeP, protP []int
		for _, i := range free {
			if units[i].Priority <= p {
				freeP = append(freeP, i)
			}
		}
		for _, i := range protected {
			if units[i].Priority <= p {
				protP = append(protP, i)
			}
		}
		if ok, err := feasible(freeP); err != nil || ok {
			return nil, ok, err
		}
		n, found, err := shortestPrefix(protP, func(prefix []int) (bool, error) { return feasible(concat(freeP, prefix)) })
		if err != nil || !found {
			return nil, false, err
		}
		keep, err := reprieve(protP[:n], func(s []int) (bool, error) { return feasible(concat(freeP, s)) })
		return keep, err == nil, err
	}

	// 1. The fewest PDB-breaking units with every priority allowed.
	keep, found, err := pdbUnits(1<<31 - 1)
	if err != nil || !found {
		return nil, false, err
	}
	// 2. The lowest priority bound that needs no more of them.
	var levels []int32
	for _, u := range units {
		levels = append(levels, u.Priority)
	}
	sort.Slice(levels, func(a, b int) bool { return levels[a] < levels[b] })
	for _, p := range levels {
		k, found, err := pdbUnits(p)
		if err != nil {
			return nil, false, err
		}
		if found && len(k) <= len(keep) {
			keep = k
			break
		}
	}
	maxPrio := int32(-1 << 31)
	for _, i := range keep {
		maxPrio = max(maxPrio, units[i].Priority)
	}
	n, _, err := shortestPrefixBy(free, func(i int) int32 { return units[free[i]].Priority }, func(prefix []int) (bool, error) {
		return feasible(concat(keep, prefix))
	})
	if err != nil {
		return nil, false, err
	}
	pool := append([]int(nil), free[:n]...)
	// Free units below the priority the kept PDB units already reach cost
	// nothing more on that criterion.
	for _, i := range free[n:] {
		if units[i].Priority <= maxPrio {
			pool = append(pool, i)
		}
	}

	// 3. Fewest jobs, devices, pods inside that bound.
	sort.SliceStable(pool, func(a, b int) bool {
		x, y := units[pool[a]], units[pool[b]]
		if x.GPUs != y.GPUs {
			return x.GPUs > y.GPUs
		}
		if x.Pods != y.Pods {
			return x.Pods < y.Pods
		}
		return x.ID < y.ID
	})
	m, found, err := shortestPrefix(pool, func(prefix []int) (bool, error) { return feasible(concat(keep, prefix)) })
	if err != nil || !found {
		return nil, found, err
	}
	chosen := concat(keep, pool[:m])
	byDamage(chosen)
	chosen, err = reprieve(chosen, feasible)
	if err != nil {
		return nil, false, err
	}
	sort.Ints(chosen)
	return chosen, true, nil
}

// shortestPrefix finds the shortest feasible prefix of order by doubling
// and binary search.
func shortestPrefix(order []int, feasible Feasible) (int, bool, error) {
	if len(order) == 0 {
		ok, err := feasible(nil)
		return 0, ok, err
	}
	hi := 1
	for {
		hi = min(hi, len(order))
		ok, err := feasible(order[:hi])
		if err != nil {
			return 0, false, err
		}
		if ok {
			break
		}
		if hi == len(order) {
			return 0, false, nil
		}
		hi *= 2
	}
	lo := hi / 2
	for lo+1 < hi {
		mid := (lo + hi) / 2
		ok, err := feasible(order[:mid])
		if err != nil {
			return 0, false, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true, nil
}

// shortestPrefixBy is shortestPrefix over the group boundaries of key:
// prefixes always end after the last unit with the same key, so that a
// priority level is taken whole.
func shortestPrefixBy(order []int, key func(int) int32, feasible Feasible) (int, bool, error) {
	var bounds []int
	for i := range order {
		if i+1 == len(order) || key(i+1) != key(i) {
			bounds = append(bounds, i+1)
		}
	}
	idx, found, err := shortestPrefix(bounds, func(b []int) (bool, error) {
		if len(b) == 0 {
			return feasible(nil)
		}
		return feasible(order[:b[len(b)-1]])
	})
	if err != nil || !found {
		return len(order), found, err
	}
	if idx == 0 {
		return 0, true, nil
	}
	return bounds[idx-1], true, nil
}

// reprieve drops every victim the oracle can do without, from the most
// damaging (last) to the least.
func reprieve(chosen []int, feasible Feasible) ([]int, error) {
	out := append([]int(nil), chosen...)
	for i := len(out) - 1; i >= 0; i-- {
		trial := concat(out[:i], out[i+1:])
		ok, err := feasible(trial)
		if err != nil {
			return nil, err
		}
		if ok {
			out = trial
		}
	}
	return out, nil
}

func concat(a, b []int) []int {
	out := make([]int, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// Exhaustive finds the cheapest feasible set by trying every subset. It is
// exponential and exists to judge Choose on small cases.
func Exhaustive(units []Unit, feasible Feasible) (best []int, ok bool, err error) {
	n := len(units)
	var bestCost Cost
	for mask := 0; mask < 1<<n; mask++ {
		var set []int
		for i := 0; i < n; i++ {
			if mask&(1<<i) != 0 {
				set = append(set, i)
			}
		}
		c := CostOf(units, set)
		if ok && !c.Less(bestCost) {
			continue
		}
		f, err := feasible(set)
		if err != nil {
			return nil, false, err
		}
		if f {
			best, bestCost, ok = set, c, true
		}
	}
	return best, ok, nil
}

// memoized asks feasible once per distinct set of units: priority levels
// with no unit of their own, and reprieve steps that end where an earlier
// search was, repeat a simulation that costs a plan over every node.
func memoized(feasible Feasible) Feasible {
	seen := map[string]bool{}
	return func(set []int) (bool, error) {
		s := slices.Clone(set)
		slices.Sort(s)
		key := fmt.Sprint(s)
		if ok, hit := seen[key]; hit {
			return ok, nil
		}
		ok, err := feasible(set)
		if err == nil {
			seen[key] = ok
		}
		return ok, err
	}
}
