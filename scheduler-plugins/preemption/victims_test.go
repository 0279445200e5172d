package preemption

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gpuOracle: the gang needs want GPUs freed on top of free ones.
func gpuOracle(units []Unit, free, want int) Feasible {
	return func(set []int) (bool, error) {
		got := free
		for _, i := range set {
			got += units[i].GPUs
		}
		return got >= want, nil
	}
}

func TestChoosePrefersLowPriorityAndFewJobs(t *testing.T) {
	units := []Unit{
		{ID: "low-small-a", Priority: 1, Pods: 1, GPUs: 2},
		{ID: "low-big", Priority: 1, Pods: 4, GPUs: 8},
		{ID: "mid", Priority: 5, Pods: 1, GPUs: 8},
		{ID: "low-small-b", Priority: 1, Pods: 1, GPUs: 2},
	}
	set, ok, err := Choose(units, gpuOracle(units, 0, 8))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if diff := cmp.Diff([]int{1}, set); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
	if _, ok, _ := Choose(units, gpuOracle(units, 0, 100)); ok {
		t.Errorf("infeasible request reported feasible")
	}
	if set, ok, _ := Choose(units, gpuOracle(units, 8, 8)); !ok || len(set) != 0 {
		t.Errorf("no eviction needed, got %v", set)
	}
}

func TestChooseSparesPDBProtectedWhenPossible(t *testing.T) {
	units := []Unit{
		{ID: "protected", Priority: 1, Pods: 1, GPUs: 8, PDBViolations: 1},
		{ID: "other", Priority: 2, Pods: 1, GPUs: 8},
	}
	set, ok, _ := Choose(units, gpuOracle(units, 0, 8))
	if !ok || len(set) != 1 || units[set[0]].ID != "other" {
		t.Errorf("victims %v, want the unprotected unit", set)
	}
	// When only the protected one helps, it is taken.
	set, ok, _ = Choose(units, gpuOracle(units, 0, 16))
	if !ok || len(set) != 2 {
		t.Errorf("victims %v, want both", set)
	}
}

// TestChooseAgainstExhaustive compares Choose with the optimum on random
// small cases and reports how far it is from it.
func TestChooseAgainstExhaustive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	worse, cases, extraJobs, higherPrio, extraPDB := 0, 300, 0, 0, 0
	for c := 0; c < cases; c++ {
		n := 3 + rng.IntN(8)
		units := make([]Unit, n)
		total := 0
		for i := range units {
			units[i] = Unit{ID: fmt.Sprintf("u%d", i), Priority: int32(rng.IntN(3)), Pods: 1 + rng.IntN(4), GPUs: 1 + rng.IntN(8)}
			if rng.IntN(5) == 0 {
				units[i].PDBViolations = 1
			}
			total += units[i].GPUs
		}
		want := 1 + rng.IntN(total)
		oracle := gpuOracle(units, 0, want)
		got, ok, _ := Choose(units, oracle)
		best, bestOK, _ := Exhaustive(units, oracle)
		if ok != bestOK {
			t.Fatalf("case %d: Choose feasible=%v, exhaustive=%v", c, ok, bestOK)
		}
		if !ok {
			continue
		}
		if f, _ := oracle(got); !f {
			t.Fatalf("case %d: Choose returned an infeasible set", c)
		}
		gc, bc := CostOf(units, got), CostOf(units, best)
		if bc.Less(gc) {
			worse++
			extraJobs += gc.Jobs - bc.Jobs
			extraPDB += gc.PDBViolations - bc.PDBViolations
			if gc.MaxPriority > bc.MaxPriority {
				higherPrio++
			}
			// Never worse on priority; the PDB count and the number of
			// jobs are set-cover problems, where the greedy may take one
			// more.
			if gc.MaxPriority > bc.MaxPriority && gc.PDBViolations == bc.PDBViolations {
				t.Errorf("case %d: Choose %v evicts higher priority than optimal %v", c, gc, bc)
			}
			if gc.PDBViolations > bc.PDBViolations+1 || gc.Jobs > bc.Jobs+1 {
				t.Errorf("case %d: Choose %v is more than one job or PDB off the optimum %v", c, gc, bc)
			}
		}
	}
	t.Logf("Choose matched the exhaustive optimum in %d of %d cases; over all of them %d extra jobs, %d extra PDB violations, %d cases with a higher victim priority", cases-worse, cases, extraJobs, extraPDB, higherPrio)
}

// TestChooseAsksEachSetOnce: priority levels without units of their own
// lead to the same candidate sets; each is simulated once.
func TestChooseAsksEachSetOnce(t *testing.T) {
	units := []Unit{{ID: "a", Priority: 1, Pods: 1}, {ID: "b", Priority: 5, Pods: 1}, {ID: "c", Priority: 9, Pods: 1}}
	asked := map[string]int{}
	set, ok, err := Choose(units, func(set []int) (bool, error) {
		s := slices.Clone(set)
		slices.Sort(s)
		asked[fmt.Sprint(s)]++
		return len(set) >= 2, nil
	})
	if err != nil || !ok || len(set) != 2 {
		t.Fatalf("Choose = %v, %v, %v; want two units", set, ok, err)
	}
	for k, n := range asked {
		if n > 1 {
			t.Errorf("set %s simulated %d times", k, n)
		}
	}
}
