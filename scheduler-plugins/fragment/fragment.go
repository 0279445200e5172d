// Package fragment measures how a placement changes a node's ability to
// host the work a cluster expects, for GPUs that are shared by fraction,
// taken whole, or taken several at a time. It is the pure algorithm behind
// Strata's fragmentation-aware scoring: no Kubernetes types, so it can be
// tested exhaustively, benchmarked alone and replayed on traces fast.
//
// # The measure
//
// A workload is a set of task shapes with weights (how often each is
// seen): CPU, memory, how many GPUs and what share of each, and the GPU
// models it accepts. For one node and one shape, two amounts of idle GPU
// (in thousandths of a GPU, "milli") are counted as lost to that shape:
//
//   - Stranded: the idle GPU that copies of the shape cannot use, when as
//     many copies are packed onto the node as its GPUs, CPU and memory
//     allow together. A node whose CPU is nearly gone strands all its idle
//     GPU; a GPU with 300 milli left strands all 300 for a 460-milli share
//     and 80 for a 220-milli one.
//   - Unreachable: FGD's fragment (Weng et al., USENIX ATC'23): all the
//     node's idle GPU if not even one copy fits (too little CPU or memory,
//     too few GPUs with room, a model it does not accept), else the idle
//     GPU of the GPUs too small for one share.
//
// The node's fragmentation is the weighted sum over shapes of
// Stranded + Alpha × Unreachable. Unreachable is a step: it jumps when a
// shape stops fitting at all. Stranded grows smoothly as CPU, memory or a
// GPU's room runs out relative to what the shapes need, so it tells the
// scheduler which node is closer to stranding its GPUs long before the
// step. A placement is scored by how much it raises the node's
// fragmentation: the lower the better.
//
// # MIG instances
//
// A GPU that can be partitioned (NVIDIA MIG under the plugin's dynamic
// mode) has memory slices, and a MIG profile may start its instances only
// at some slices (NVML's placement table). A task may ask for instances
// of a profile; a GPU hosts one when one of the profile's
// placements is free and the GPU is not held whole or in shares (those
// draw on every slice, so the two uses exclude each other, as the
// plugin's counters make the allocator see them). An instance's share is
// its slices' share of the GPU. For other shapes, a GPU with instances
// has no room at all and its free slices are lost; for a profile, the
// free slices that its placements cannot cover are (seven 1g instances
// leave the eighth slice of an A100 unused).
//
// # Placement inside a node
//
// The DRA allocator, not the scorer, picks a node's GPUs: it takes the
// first devices in slice order that satisfy the claim. Delta therefore
// evaluates FirstFit's choice, so the score describes what will happen.
package fragment

import (
	"math/bits"
	"slices"
	"sort"
)

// Whole is a whole GPU in milli.
const Whole = 1000

// Node is what a node has free.
type Node struct {
	// CPU is free milli-CPU; Memory free bytes.
	CPU, Memory int64
	// Model is the node's GPU model, matched against Task.Models.
	Model string
	// GPUs is each GPU's free share in milli (0 to Whole), in the order
	// the DRA allocator tries them; 0 for a GPU with MIG instances.
	GPUs []int32
	// MIG is the GPUs' partition layout where they can be partitioned
	// (all GPUs of a node are one model); nil otherwise.
	MIG *MIGLayout
	// Slices holds, per GPU, the memory slices its MIG instances take
	// (bit i for slice i); only with MIG.
	Slices []uint32
}

// MIGLayout is how a GPU model is partitioned: its memory slices and the
// placements of each MIG profile.
type MIGLayout struct {
	// Slices is the number of memory slices of a GPU (at most 32).
	Slices int
	// Profiles holds each profile's placements as slice masks, in the
	// order the allocator tries them, which must be by first slice: all
	// placements of a profile take the same number of slices, listed by
	// where they start, as NVML lists them and the plugin publishes them.
	Profiles map[string][]uint32
}

// Placement is the slice mask of a MIG placement that starts at start and
// takes size slices.
func Placement(start, size int) uint32 {
	return (1<<size - 1) << start
}

// Idle is the node's free GPU in milli.
func (n *Node) Idle() int64 {
	var s int64
	for i := range n.GPUs {
		s += n.idleOf(i)
	}
	return s
}

// idleOf is a GPU's free GPU in milli: its free share, or the free
// slices of a GPU with MIG instances.
func (n *Node) idleOf(i int) int64 {
	if n.MIG == nil || n.Slices[i] == 0 {
		return int64(n.GPUs[i])
	}
	free := n.MIG.Slices - bits.OnesCount32(n.Slices[i])
	return int64(free) * Whole / int64(n.MIG.Slices)
}

// partitionable says whether GPU i may take a MIG instance: it has
// instances already, or nothing at all.
func (n *Node) partitionable(i int) bool {
	return n.Slices[i] != 0 || n.GPUs[i] == Whole
}

// Task is what one pod asks for.
type Task struct {
	CPU, Memory int64
	// GPUs is how many GPUs; 0 for a pod without GPUs.
	GPUs int
	// Milli is the share of each GPU: Whole for whole GPUs, less for a
	// share (then GPUs is 1).
	Milli int32
	// Models are the GPU models the task accepts; empty accepts any.
	Models []string
	// Profile, if set, is the MIG profile of the instances the task asks
	// for; GPUs is then how many instances (on any GPUs) and Milli an
	// instance's share of a GPU.
	Profile string
}

// GPUMilli is the task's GPU demand in milli.
func (t Task) GPUMilli() int64 { return int64(t.GPUs) * int64(t.Milli) }

func (t Task) accepts(model string) bool {
	return len(t.Models) == 0 || slices.Contains(t.Models, model)
}

// Fit is where a task goes on a node: its GPUs, and for MIG instances
// the slices each takes on its GPU (Slices[k] on GPUs[k]; a GPU may be
// listed once per instance).
type Fit struct {
	GPUs   []int
	Slices []uint32
}

// FirstFit returns what the DRA allocator would give the task on the node
// (the first GPUs, in order, with room for its share; for MIG instances
// the first free placements of their profile, GPU by GPU), or false if
// the node cannot host it.
func FirstFit(n *Node, t Task) (Fit, bool) {
	if t.CPU > n.CPU || t.Memory > n.Memory {
		return Fit{}, false
	}
	if t.GPUs == 0 {
		return Fit{}, true
	}
	if !t.accepts(n.Model) {
		return Fit{}, false
	}
	if t.Profile != "" {
		return firstPlacements(n, t)
	}
	got := make([]int, 0, t.GPUs)
	for i, f := range n.GPUs {
		if f >= t.Milli {
			got = append(got, i)
			if len(got) == t.GPUs {
				return Fit{GPUs: got}, true
			}
		}
	}
	return Fit{}, false
}

func firstPlacements(n *Node, t Task) (Fit, bool) {
	if n.MIG == nil {
		return Fit{}, false
	}
	placements := n.MIG.Profiles[t.Profile]
	var f Fit
	for i := range n.GPUs {
		if !n.partitionable(i) {
			continue
		}
		used := n.Slices[i]
		for _, p := range placements {
			if used&p != 0 {
				continue
			}
			used |= p
			f.GPUs, f.Slices = append(f.GPUs, i), append(f.Slices, p)
			if len(f.GPUs) == t.GPUs {
				return f, true
			}
		}
	}
	return Fit{}, false
}

// Apply places (sign 1) or removes (sign -1) the task where f says.
func Apply(n *Node, t Task, f Fit, sign int64) {
	n.CPU -= sign * t.CPU
	n.Memory -= sign * t.Memory
	if f.Slices != nil {
		for k, i := range f.GPUs {
			if sign > 0 {
				n.Slices[i] |= f.Slices[k]
				n.GPUs[i] = 0
			} else if n.Slices[i] &^= f.Slices[k]; n.Slices[i] == 0 {
				n.GPUs[i] = Whole
			}
		}
		return
	}
	for _, i := range f.GPUs {
		n.GPUs[i] -= int32(sign) * t.Milli
	}
}

// Shape is a task shape of a workload and its weight.
type Shape struct {
	Task
	Weight float64
}

// Options tune a Workload.
type Options struct {
	// Coverage keeps the most frequent shapes until they account for
	// this fraction of the weight (0 or 1 keeps all): rare shapes cost
	// time and say little. 0.95 by default.
	Coverage float64
	// Alpha weighs Unreachable against Stranded. 10 by default.
	Alpha float64
	// UnreachableOnly leaves Stranded out: FGD's own measure, for
	// comparison.
	UnreachableOnly bool
}

// DefaultOptions are the options measured best on the openb traces (see
// docs/benchmarks.md).
var DefaultOptions = Options{Coverage: 0.95, Alpha: 10}

// Workload is the expected mix of tasks.
type Workload struct {
	shapes []Shape
	// asks holds what the shapes ask of GPUs, each once (a Task without
	// CPU and memory); ask[i] is shape i's. Shapes that differ only in
	// CPU and memory read a node's GPUs the same way, and a mix has many
	// of them: Fragmentation reads the GPUs once per ask.
	asks     []Task
	ask      []int
	alpha    float64
	stranded float64
}

// NewWorkload keeps the most frequent shapes (merging equal ones) up to
// the coverage, heaviest first, with weights scaled to sum to 1: the
// fragmentation is then the expected lost GPU in milli.
func NewWorkload(shapes []Shape, o Options) *Workload {
	if o.Coverage <= 0 || o.Coverage > 1 {
		o.Coverage = 1
	}
	merged := mergeShapes(shapes)
	sort.SliceStable(merged, func(i, j int) bool { return merged[i].Weight > merged[j].Weight })
	var total float64
	for _, s := range merged {
		total += s.Weight
	}
	var kept float64
	n := 0
	for n < len(merged) && kept < o.Coverage*total {
		kept += merged[n].Weight
		n++
	}
	kept = 0
	for _, s := range merged[:n] {
		kept += s.Weight
	}
	for i := range merged[:n] {
		merged[i].Weight /= kept
	}
	w := &Workload{shapes: merged[:n], ask: make([]int, n), alpha: o.Alpha, stranded: 1}
	for i, s := range w.shapes {
		a := Task{GPUs: s.GPUs, Milli: s.Milli, Models: s.Models, Profile: s.Profile}
		k := slices.IndexFunc(w.asks, func(b Task) bool { return sameTask(a, b) })
		if k < 0 {
			k = len(w.asks)
			w.asks = append(w.asks, a)
		}
		w.ask[i] = k
	}
	if o.UnreachableOnly {
		w.alpha, w.stranded = 1, 0
	}
	return w
}

func mergeShapes(in []Shape) []Shape {
	var out []Shape
	for _, s := range in {
		if s.Weight <= 0 {
			continue
		}
		i := slices.IndexFunc(out, func(o Shape) bool { return sameTask(o.Task, s.Task) })
		if i < 0 {
			out = append(out, s)
			continue
		}
		out[i].Weight += s.Weight
	}
	return out
}

func sameTask(a, b Task) bool {
	return a.CPU == b.CPU && a.Memory == b.Memory && a.GPUs == b.GPUs && a.Milli == b.Milli && a.Profile == b.Profile && slices.Equal(a.Models, b.Models)
}

// Shapes returns the workload's shapes, heaviest first.
func (w *Workload) Shapes() []Shape { return slices.Clone(w.shapes) }

// Fragmentation is the node's expected lost GPU, in milli.
func (w *Workload) Fragmentation(n *Node) float64 {
	idle := n.Idle()
	if idle == 0 {
		return 0
	}
	// The node's GPUs are read once per ask; the shapes are summed in
	// their order, as if each read them.
	var buf [48]gpuReading
	var readings []gpuReading
	if len(w.asks) > len(buf) {
		readings = make([]gpuReading, len(w.asks))
	} else {
		readings = buf[:len(w.asks)]
	}
	for k, a := range w.asks {
		readings[k] = readGPUs(n, a)
	}
	var f float64
	for i, s := range w.shapes {
		st, un := readings[w.ask[i]].lost(n, s.Task, idle)
		f += s.Weight * (w.stranded*float64(st) + w.alpha*float64(un))
	}
	return f
}

// Delta is how much placing the task where f says raises the node's
// fragmentation (negative if it lowers it).
func (w *Workload) Delta(n *Node, t Task, f Fit) float64 {
	before := w.Fragmentation(n)
	Apply(n, t, f, 1)
	after := w.Fragmentation(n)
	Apply(n, t, f, -1)
	return after - before
}

// lost returns the stranded and unreachable idle GPU of a node for one
// shape, reading its GPUs for that shape alone (Fragmentation shares
// the reading between shapes of one ask).
func lost(n *Node, t Task, idle int64) (stranded, unreachable int64) {
	r := readGPUs(n, t)
	return r.lost(n, t, idle)
}

// gpuReading is what a node's GPUs offer a task, whatever its CPU and
// memory: how many copies they hold, and the idle GPU of those too small
// for one.
type gpuReading struct {
	// blind: nothing of the node's GPU serves the task.
	blind         bool
	copies, small int64
}

func readGPUs(n *Node, t Task) gpuReading {
	var r gpuReading
	if t.GPUs == 0 || !t.accepts(n.Model) {
		r.blind = true
		return r
	}
	if t.Profile != "" {
		var ok bool
		if r.copies, r.small, ok = migCopies(n, t); !ok {
			r.blind = true
		}
		return r
	}
	var roomy int64
	for i, f := range n.GPUs {
		if f >= t.Milli {
			roomy++
		} else {
			r.small += n.idleOf(i)
		}
		if t.Milli < Whole {
			r.copies += int64(f / t.Milli)
		}
	}
	if t.Milli >= Whole {
		r.copies = roomy / int64(t.GPUs)
	}
	return r
}

// lost is the stranded and unreachable idle GPU of the node for a task
// whose GPU ask the reading is of.
func (r *gpuReading) lost(n *Node, t Task, idle int64) (stranded, unreachable int64) {
	if r.blind {
		return idle, idle
	}
	// As many copies as GPUs, CPU and memory allow together; a division
	// only where CPU or memory is the limit.
	copies := r.copies
	if t.CPU > 0 && copies*t.CPU > n.CPU {
		copies = n.CPU / t.CPU
	}
	if t.Memory > 0 && copies*t.Memory > n.Memory {
		copies = n.Memory / t.Memory
	}
	stranded = idle - copies*t.GPUMilli()
	if copies == 0 {
		return stranded, idle
	}
	return stranded, r.small
}

// migCopies is how many copies of a MIG task the node's GPUs hold at
// once, and the idle GPU of the GPUs that hold no instance of its
// profile; false if the node has no placements of the profile.
func migCopies(n *Node, t Task) (copies, small int64, ok bool) {
	var placements []uint32
	if n.MIG != nil {
		placements = n.MIG.Profiles[t.Profile]
	}
	if len(placements) == 0 {
		return 0, 0, false
	}
	var held int64
	for i := range n.GPUs {
		c := 0
		if n.partitionable(i) {
			c = instances(n.Slices[i], placements)
		}
		if c == 0 {
			small += n.idleOf(i)
		}
		held += int64(c)
	}
	return held / int64(t.GPUs), small, true
}

// instances is how many instances of a profile fit at once in a GPU's
// free slices: placements taken greedily in order. Placements of one size
// listed by start are listed by end too, and taking intervals by earliest
// end packs the most.
func instances(used uint32, placements []uint32) int {
	n := 0
	for _, p := range placements {
		if used&p == 0 {
			used |= p
			n++
		}
	}
	return n
}
