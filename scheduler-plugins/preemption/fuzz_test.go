package preemption

import (
	"fmt"
	"testing"
)

// FuzzChoose holds the victim search to the brute-force optimum on small
// inputs: the same verdict on whether room can be made, a set that makes
// it, each victim (a whole job) once, never a higher victim priority than
// the optimum's unless a PodDisruptionBudget forced it, and at most one
// job or one broken budget more than the optimum (the set-cover part of
// the cost, where Choose is greedy).
func FuzzChoose(f *testing.F) {
	f.Add([]byte{1, 2, 8, 0, 1, 4, 8, 0, 5, 1, 8, 0}, byte(8), byte(0))
	f.Add([]byte{1, 1, 2, 1, 1, 1, 2, 0, 9, 1, 1, 0}, byte(3), byte(1))
	f.Fuzz(func(t *testing.T, data []byte, want, free byte) {
		var units []Unit
		total := 0
		for i := 0; i+3 < len(data) && len(units) < 10; i += 4 {
			u := Unit{ID: fmt.Sprint("u", len(units)), Priority: int32(data[i] % 4), Pods: 1 + int(data[i+1]%4), GPUs: int(data[i+2] % 9), PDBViolations: int(data[i+3] % 2)}
			total += u.GPUs
			units = append(units, u)
		}
		need := int(want) % (total + 3)
		oracle := gpuOracle(units, int(free%3), need)
		got, ok, err := Choose(units, oracle)
		if err != nil {
			t.Fatal(err)
		}
		best, bestOK, err := Exhaustive(units, oracle)
		if err != nil {
			t.Fatal(err)
		}
		if ok != bestOK {
			t.Fatalf("Choose says room %v, the exhaustive search %v (units %+v, need %d)", ok, bestOK, units, need)
		}
		if !ok {
			return
		}
		seen := map[int]bool{}
		for _, i := range got {
			if i < 0 || i >= len(units) || seen[i] {
				t.Fatalf("victim set %v: index out of range or twice", got)
			}
			seen[i] = true
		}
		if f, _ := oracle(got); !f {
			t.Fatalf("Choose's set %v does not make room (units %+v, need %d)", got, units, need)
		}
		gc, bc := CostOf(units, got), CostOf(units, best)
		if gc.MaxPriority > bc.MaxPriority && gc.PDBViolations == bc.PDBViolations {
			t.Fatalf("Choose %v evicts a higher priority than the optimum %v (units %+v, need %d)", gc, bc, units, need)
		}
		if gc.PDBViolations > bc.PDBViolations+1 || gc.Jobs > bc.Jobs+1 {
			t.Fatalf("Choose %v is more than one job or budget off the optimum %v (units %+v, need %d)", gc, bc, units, need)
		}
	})
}
