package fitplus

import (
	"testing"

	"github.com/strata-sh/strata/api/schedulerargs"
)

func TestResourceScore(t *testing.T) {
	tests := []struct {
		name                   string
		typ                    schedulerargs.ScoringType
		requested, allocatable int64
		want                   int64
	}{
		{"most: 6 of 8", schedulerargs.MostAllocated, 6, 8, 75},
		{"most: full", schedulerargs.MostAllocated, 8, 8, 100},
		{"most: over capacity counts as full", schedulerargs.MostAllocated, 10, 8, 100},
		{"most: rounds down", schedulerargs.MostAllocated, 7, 8, 87},
		{"most: nothing on the node", schedulerargs.MostAllocated, 2, 0, 0},
		{"least: 6 of 8", schedulerargs.LeastAllocated, 6, 8, 25},
		{"least: empty", schedulerargs.LeastAllocated, 0, 8, 100},
		{"least: over capacity", schedulerargs.LeastAllocated, 9, 8, 0},
		{"least: rounds down", schedulerargs.LeastAllocated, 1, 8, 87},
		{"least: nothing on the node", schedulerargs.LeastAllocated, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := resourceScore(tc.typ, tc.requested, tc.allocatable); got != tc.want {
				t.Errorf("resourceScore(%s, %d, %d) = %d, want %d", tc.typ, tc.requested, tc.allocatable, got, tc.want)
			}
		})
	}
}
