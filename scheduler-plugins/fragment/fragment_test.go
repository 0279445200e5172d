package fragment

import (
	"math"
	"slices"
	"testing"
)

const gi = int64(1) << 30

func node(cpu int64, gpus ...int32) *Node {
	return &Node{CPU: cpu, Memory: 256 * gi, Model: "T4", GPUs: gpus}
}

func share(milli int32, cpu int64) Task { return Task{CPU: cpu, Memory: gi, GPUs: 1, Milli: milli} }

func whole(n int, cpu int64) Task { return Task{CPU: cpu, Memory: gi, GPUs: n, Milli: Whole} }

func TestFirstFit(t *testing.T) {
	cases := map[string]struct {
		n    *Node
		t    Task
		want []int
		ok   bool
	}{
		"share skips a GPU too small":       {node(8000, 300, 1000, 1000), share(460, 1000), []int{1}, true},
		"share takes the first with room":   {node(8000, 600, 1000), share(460, 1000), []int{0}, true},
		"two whole GPUs":                    {node(8000, 300, 1000, 1000), whole(2, 1000), []int{1, 2}, true},
		"three whole GPUs do not fit":       {node(8000, 300, 1000, 1000), whole(3, 1000), nil, false},
		"too little CPU":                    {node(500, 1000), share(220, 1000), nil, false},
		"too little memory":                 {&Node{CPU: 8000, Memory: gi / 2, GPUs: []int32{1000}}, share(220, 1000), nil, false},
		"model not accepted":                {node(8000, 1000), Task{CPU: 1, GPUs: 1, Milli: Whole, Models: []string{"V100M32", "P100"}}, nil, false},
		"model accepted":                    {node(8000, 1000), Task{CPU: 1, GPUs: 1, Milli: Whole, Models: []string{"P100", "T4"}}, []int{0}, true},
		"a CPU-only task needs no GPU":      {node(8000, 0, 0), Task{CPU: 1000}, nil, true},
		"a CPU-only task needs its CPU":     {node(800), Task{CPU: 1000}, nil, false},
		"a CPU-only task ignores the model": {&Node{CPU: 8000, Memory: gi, Model: "T4"}, Task{CPU: 1000, Models: []string{"P100"}}, nil, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := FirstFit(c.n, c.t)
			if ok != c.ok || !slices.Equal(got, c.want) {
				t.Errorf("FirstFit = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestLost(t *testing.T) {
	n := node(8000, 300, 1000)
	cases := map[string]struct {
		n                     *Node
		t                     Task
		stranded, unreachable int64
	}{
		// Five 220-milli copies: one on the 300 GPU, four on the whole
		// one; 80 + 120 left over. No GPU is too small for one.
		"small share": {n, share(220, 1000), 200, 0},
		// Two 460 copies on the whole GPU; the 300 GPU is too small.
		"large share": {n, share(460, 1000), 380, 300},
		// One whole GPU; the 300 left on the other is lost to it.
		"whole GPU": {n, whole(1, 6000), 300, 300},
		// The CPU allows one 220 copy only.
		"CPU-bound copies": {node(1500, 300, 1000), share(220, 1000), 1300 - 220, 0},
		// Not one copy fits: everything is lost, both ways.
		"no CPU for one":    {node(500, 300, 1000), share(220, 1000), 1300, 1300},
		"two whole GPUs":    {n, whole(2, 1000), 1300, 1300},
		"a CPU-only task":   {n, Task{CPU: 1000}, 1300, 1300},
		"a model not taken": {n, Task{CPU: 1, GPUs: 1, Milli: Whole, Models: []string{"A10"}}, 1300, 1300},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			st, un := lost(c.n, c.t, c.n.Idle())
			if st != c.stranded || un != c.unreachable {
				t.Errorf("lost = %d stranded, %d unreachable; want %d, %d", st, un, c.stranded, c.unreachable)
			}
		})
	}
}

func TestFragmentationWeighsShapes(t *testing.T) {
	w := NewWorkload([]Shape{{share(220, 1000), 3}, {share(460, 1000), 1}}, Options{Alpha: 2})
	// ¾ × (200 + 2×0) + ¼ × (380 + 2×300)
	if got, want := w.Fragmentation(node(8000, 300, 1000)), (3*200.0+380+600)/4; got != want {
		t.Errorf("Fragmentation = %v, want %v", got, want)
	}
	fgd := NewWorkload([]Shape{{share(220, 1000), 3}, {share(460, 1000), 1}}, Options{UnreachableOnly: true})
	if got, want := fgd.Fragmentation(node(8000, 300, 1000)), 300.0/4; got != want {
		t.Errorf("FGD's Fragmentation = %v, want %v", got, want)
	}
	if got := w.Fragmentation(node(8000, 0, 0)); got != 0 {
		t.Errorf("a node with no idle GPU has fragmentation %v, want 0", got)
	}
}

// Where whole GPUs are the common ask, a share goes to the GPU that is
// already broken rather than breaking a whole one.
func TestDeltaPrefersTheBrokenGPU(t *testing.T) {
	w := NewWorkload([]Shape{{whole(1, 4000), 6}, {share(460, 4000), 3}, {Task{CPU: 2000}, 1}}, DefaultOptions)
	s := share(460, 4000)
	broken := node(64000, 540, 1000)
	fresh := node(64000, 1000, 1000)
	gb, _ := FirstFit(broken, s)
	gf, _ := FirstFit(fresh, s)
	db, df := w.Delta(broken, s, gb), w.Delta(fresh, s, gf)
	if db >= df {
		t.Errorf("Delta on the broken GPU %v, on a fresh one %v; want the broken one lower", db, df)
	}
	// Delta leaves the node as it was.
	if !slices.Equal(broken.GPUs, []int32{540, 1000}) || broken.CPU != 64000 {
		t.Errorf("Delta changed the node: %+v", broken)
	}
}

// A CPU-only pod goes where it strands the least GPU: a node whose GPUs
// are all taken, not one whose idle GPUs need its CPU.
func TestDeltaKeepsCPUPodsOffNeededCPU(t *testing.T) {
	w := NewWorkload([]Shape{{whole(1, 8000), 1}}, DefaultOptions)
	cpuPod := Task{CPU: 8000, Memory: gi}
	busy := node(16000, 0, 0)
	needed := node(16000, 1000, 1000)
	if db, dn := w.Delta(busy, cpuPod, nil), w.Delta(needed, cpuPod, nil); db != 0 || dn <= 0 {
		t.Errorf("Delta on the full node %v, on the node with idle GPUs %v; want 0 and more", db, dn)
	}
}

func TestCoverageKeepsTheHeaviestShapes(t *testing.T) {
	w := NewWorkload([]Shape{{share(100, 1), 5}, {share(200, 1), 50}, {share(300, 1), 15}, {share(400, 1), 30}, {share(200, 1), 0}}, Options{Coverage: 0.9})
	var got []int32
	for _, s := range w.Shapes() {
		got = append(got, s.Milli)
	}
	if !slices.Equal(got, []int32{200, 400, 300}) {
		t.Errorf("kept shapes %v, want 200, 400, 300", got)
	}
	// Equal shapes are merged.
	w = NewWorkload([]Shape{{share(100, 1), 1}, {share(100, 1), 2}}, Options{})
	if s := w.Shapes(); len(s) != 1 || s[0].Weight != 1 {
		t.Errorf("merged shapes %+v, want one of all the weight", s)
	}
}

func TestHistogramDecays(t *testing.T) {
	h := &Histogram{HalfLife: 1}
	a, b := share(100, 1), share(200, 1)
	h.Observe(a)
	h.Observe(b)
	h.Observe(b)
	// a is two halvings old, the b's one and none: 0.25 against 1.5.
	s := h.Workload(Options{}).Shapes()
	if len(s) != 2 || s[0].Milli != 200 || math.Abs(s[1].Weight/s[0].Weight-0.25/1.5) > 1e-9 {
		t.Errorf("shapes %+v, want b then a at a sixth of its weight", s)
	}
	flat := &Histogram{}
	flat.Observe(a)
	flat.Observe(b)
	flat.Observe(a)
	if s := flat.Workload(Options{}).Shapes(); math.Abs(s[0].Weight-2.0/3) > 1e-9 || math.Abs(s[1].Weight-1.0/3) > 1e-9 {
		t.Errorf("undecayed shapes %+v, want two thirds and a third", s)
	}
}
