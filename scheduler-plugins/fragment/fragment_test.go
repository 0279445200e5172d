package fragment

import (
	"math"
	"math/rand/v2"
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
			if ok != c.ok || !slices.Equal(got.GPUs, c.want) || got.Slices != nil {
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
	if db, dn := w.Delta(busy, cpuPod, Fit{}), w.Delta(needed, cpuPod, Fit{}); db != 0 || dn <= 0 {
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

// a100 is the MIG layout of an A100 40GB as NVML lists it: eight memory
// slices; 1g.5gb may start at slices 0-6, 2g.10gb at 0, 2 and 4, 3g.20gb
// at 0 and 4, 4g.20gb and 7g.40gb at 0 only.
var a100 = &MIGLayout{Slices: 8, Profiles: map[string][]uint32{
	"1g.5gb":  {Placement(0, 1), Placement(1, 1), Placement(2, 1), Placement(3, 1), Placement(4, 1), Placement(5, 1), Placement(6, 1)},
	"2g.10gb": {Placement(0, 2), Placement(2, 2), Placement(4, 2)},
	"3g.20gb": {Placement(0, 4), Placement(4, 4)},
	"4g.20gb": {Placement(0, 4)},
	"7g.40gb": {Placement(0, 8)},
}}

// migNode is an A100 node whose GPUs have the given free shares and MIG
// slices taken.
func migNode(gpus []int32, used []uint32) *Node {
	return &Node{CPU: 64000, Memory: 256 * gi, Model: "A100", GPUs: gpus, MIG: a100, Slices: used}
}

func mig(profile string, milli int32) Task {
	return Task{CPU: 1000, Memory: gi, GPUs: 1, Milli: milli, Profile: profile}
}

func TestFirstFitMIG(t *testing.T) {
	cases := map[string]struct {
		n    *Node
		t    Task
		want Fit
		ok   bool
	}{
		"first placement of a whole GPU": {migNode([]int32{1000, 1000}, []uint32{0, 0}), mig("3g.20gb", 500), Fit{GPUs: []int{0}, Slices: []uint32{0x0f}}, true},
		"next free placement":            {migNode([]int32{0, 1000}, []uint32{0x0f, 0}), mig("3g.20gb", 500), Fit{GPUs: []int{0}, Slices: []uint32{0xf0}}, true},
		// 1g.5gb cannot start at slice 7.
		"no placement on the last slice": {migNode([]int32{0, 1000}, []uint32{0x7f, 0}), mig("1g.5gb", 125), Fit{GPUs: []int{1}, Slices: []uint32{0x01}}, true},
		// Three instances: the last free one of GPU 0, then GPU 1's.
		"several instances":  {migNode([]int32{0, 1000}, []uint32{0x3f, 0}), Task{CPU: 1000, GPUs: 3, Milli: 125, Profile: "1g.5gb"}, Fit{GPUs: []int{0, 1, 1}, Slices: []uint32{0x40, 0x01, 0x02}}, true},
		"too many instances": {migNode([]int32{0}, []uint32{0x01}), Task{CPU: 1000, GPUs: 2, Milli: 500, Profile: "3g.20gb"}, Fit{}, false},
		// 4g.20gb starts at slice 0 only, which a 1g instance holds.
		"placements are where NVML allows": {migNode([]int32{0}, []uint32{0x01}), mig("4g.20gb", 500), Fit{}, false},
		// A GPU held in shares draws on every slice.
		"not on a shared GPU":       {migNode([]int32{600, 0}, []uint32{0, 0}), mig("1g.5gb", 125), Fit{}, false},
		"not without MIG":           {node(8000, 1000), mig("1g.5gb", 125), Fit{}, false},
		"not a profile of the GPU":  {migNode([]int32{1000}, []uint32{0}), mig("1g.10gb", 125), Fit{}, false},
		"whole GPUs skip instances": {migNode([]int32{0, 1000}, []uint32{0x01, 0}), whole(1, 1000), Fit{GPUs: []int{1}}, true},
		"shares skip instances":     {migNode([]int32{0, 1000}, []uint32{0x01, 0}), share(300, 1000), Fit{GPUs: []int{1}}, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := FirstFit(c.n, c.t)
			if ok != c.ok || !slices.Equal(got.GPUs, c.want.GPUs) || !slices.Equal(got.Slices, c.want.Slices) {
				t.Errorf("FirstFit = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// Placing and removing instances keeps the GPU's free share and slices
// consistent: a GPU with instances has no free share, and gets it back
// whole with its last instance gone.
func TestApplyMIG(t *testing.T) {
	n := migNode([]int32{1000}, []uint32{0})
	a, b := Fit{GPUs: []int{0}, Slices: []uint32{0x0f}}, Fit{GPUs: []int{0}, Slices: []uint32{0x30}}
	Apply(n, mig("3g.20gb", 500), a, 1)
	Apply(n, mig("2g.10gb", 250), b, 1)
	if n.GPUs[0] != 0 || n.Slices[0] != 0x3f || n.Idle() != 250 || n.CPU != 62000 {
		t.Fatalf("after two instances: %+v, idle %d; want no free share, slices 0x3f, 250 idle", n, n.Idle())
	}
	Apply(n, mig("3g.20gb", 500), a, -1)
	if n.GPUs[0] != 0 || n.Slices[0] != 0x30 || n.Idle() != 750 {
		t.Fatalf("after one removed: %+v, idle %d; want slices 0x30, 750 idle", n, n.Idle())
	}
	Apply(n, mig("2g.10gb", 250), b, -1)
	if n.GPUs[0] != Whole || n.Slices[0] != 0 || n.Idle() != Whole || n.CPU != 64000 {
		t.Fatalf("after both removed: %+v; want the GPU whole again", n)
	}
}

func TestLostMIG(t *testing.T) {
	// GPU 0 holds a 3g instance on slices 0-3; GPU 1 is whole; GPU 2 is
	// held in shares (400 free).
	n := migNode([]int32{0, 1000, 400}, []uint32{0x0f, 0, 0})
	idle := n.Idle() // 500 + 1000 + 400
	cases := map[string]struct {
		t                     Task
		stranded, unreachable int64
	}{
		// Two on GPU 1, one on GPU 0's free half; the shared GPU is too
		// small for a 3g instance (it cannot take one at all).
		"3g.20gb": {mig("3g.20gb", 500), idle - 3*500, 400},
		// 4g.20gb starts at slice 0 only: GPU 0's free half is lost too.
		"4g.20gb": {mig("4g.20gb", 500), idle - 500, 500 + 400},
		// Seven 1g on GPU 1 (slice 7 unused), three on GPU 0 (slices 4-6).
		"1g.5gb": {mig("1g.5gb", 125), idle - 10*125, 400},
		// A whole GPU: only GPU 1; GPU 0's free slices are lost to it.
		"whole GPU": {whole(1, 1000), idle - 1000, 500 + 400},
		// A 300 share: GPU 1 (three) and GPU 2 (one); GPU 0 is lost.
		"share":           {share(300, 1000), idle - 4*300, 500},
		"unknown profile": {mig("1g.10gb", 250), idle, idle},
		// Two 3g instances per task: three fit, so one task.
		"two instances": {Task{CPU: 1000, GPUs: 2, Milli: 500, Profile: "3g.20gb"}, idle - 1000, 400},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			st, un := lost(n, c.t, idle)
			if st != c.stranded || un != c.unreachable {
				t.Errorf("lost = %d stranded, %d unreachable; want %d, %d", st, un, c.stranded, c.unreachable)
			}
		})
	}
}

// Where whole GPUs and large instances are the common ask, a small
// instance goes onto a GPU that already has instances, at the placement
// that leaves the larger ones room, rather than breaking a whole GPU.
func TestDeltaPacksInstances(t *testing.T) {
	w := NewWorkload([]Shape{{whole(1, 1000), 4}, {mig("3g.20gb", 500), 3}, {mig("1g.5gb", 125), 3}}, DefaultOptions)
	small := mig("1g.5gb", 125)
	n := migNode([]int32{0, 1000}, []uint32{0x0f, 0})
	f, ok := FirstFit(n, small)
	if !ok || f.GPUs[0] != 0 {
		t.Fatalf("FirstFit = %+v, %v; want GPU 0, which has an instance", f, ok)
	}
	onBroken := w.Delta(n, small, f)
	onWhole := w.Delta(n, small, Fit{GPUs: []int{1}, Slices: []uint32{0x01}})
	if onBroken >= onWhole {
		t.Errorf("Delta on the partitioned GPU %v, on the whole one %v; want the partitioned one lower", onBroken, onWhole)
	}
	if n.GPUs[1] != Whole || n.Slices[0] != 0x0f || n.Slices[1] != 0 {
		t.Errorf("Delta changed the node: %+v", n)
	}
}

// TestFragmentationReadsGPUsOncePerAsk: shapes that ask the same of GPUs
// share one reading of a node's GPUs; the sum is the same, to the bit, as
// each shape's own measure summed in order, on nodes of every kind and a
// mix of more asks than fit on the stack.
func TestFragmentationReadsGPUsOncePerAsk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 14))
	models := [][]string{nil, {"T4"}, {"A100"}, {"T4", "V100"}}
	profiles := []struct {
		name  string
		milli int32
	}{{"1g.5gb", 125}, {"2g.10gb", 250}, {"3g.20gb", 500}, {"7g.40gb", Whole}}
	for _, asks := range []int{3, 40, 90} {
		var shapes []Shape
		for i := range asks {
			// Distinct asks: one without GPUs, then whole GPUs, shares
			// and MIG instances in turn.
			var ask Task
			switch {
			case i == 0:
			case i%3 == 0:
				ask = Task{GPUs: 1 + i/3, Milli: Whole}
			case i%3 == 1:
				ask = Task{GPUs: 1, Milli: int32(10 + 20*i)}
			default:
				p := profiles[i%len(profiles)]
				ask = Task{GPUs: 1 + i/3, Milli: p.milli, Profile: p.name}
			}
			if i > 0 {
				ask.Models = models[(i/3)%len(models)]
			}
			// Several shapes per ask, differing in CPU and memory.
			for range 1 + rng.IntN(4) {
				s := ask
				s.CPU, s.Memory = int64(rng.IntN(16000)), int64(rng.IntN(64))*gi
				shapes = append(shapes, Shape{Task: s, Weight: 1 + rng.Float64()})
			}
		}
		w := NewWorkload(shapes, Options{Coverage: 1, Alpha: 10})
		if len(w.asks) != asks {
			t.Fatalf("%d asks read, want %d", len(w.asks), asks)
		}
		for k := range 200 {
			n := &Node{CPU: int64(rng.IntN(64000)), Memory: int64(rng.IntN(256)) * gi, Model: []string{"T4", "A100", "V100"}[k%3], GPUs: make([]int32, 8)}
			if n.Model == "A100" {
				n.MIG, n.Slices = a100, make([]uint32, 8)
			}
			for i := range n.GPUs {
				switch {
				case n.MIG != nil && i%3 == 0:
					n.Slices[i] = uint32(rng.IntN(256))
					if n.Slices[i] == 0 {
						n.GPUs[i] = Whole
					}
				default:
					n.GPUs[i] = int32(rng.IntN(Whole + 1))
				}
			}
			idle := n.Idle()
			want := 0.0
			if idle > 0 {
				for _, s := range w.shapes {
					st, un := lost(n, s.Task, idle)
					want += s.Weight * (float64(st) + 10*float64(un))
				}
			}
			if got := w.Fragmentation(n); got != want {
				t.Fatalf("asks %d, node %d %+v: fragmentation %v, want %v shape by shape", asks, k, n, got, want)
			}
		}
	}
}
