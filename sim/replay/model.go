package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/strata-sh/strata/scheduler-plugins/fragment"
)

// Model policies: how the model engine picks a node for a pod.
const (
	// PolicyStrata is Strata's fragmentation measure (package fragment,
	// default options): the node whose fragmentation grows least, the
	// earliest node on a tie.
	PolicyStrata = "strata"
	// PolicyFGD is the trace authors' FGD as their simulator runs it:
	// int(100·sigmoid(-Δ/1000)) of their fragment measure, ties to the
	// earliest node.
	PolicyFGD = "fgd"
	// PolicyBestFit is their best-fit: least free CPU and GPU after the
	// pod, each over the largest node's (128 cores, 8 GPUs).
	PolicyBestFit = "bestfit"
	// PolicyRandom picks a node that fits at random.
	PolicyRandom = "random"
	// PolicyStrataGPUChoice is Strata's measure choosing the GPU inside
	// the node as well: for a share, every GPU with room (one per free
	// amount) is tried, and the pair of node and GPU whose fragmentation
	// grows least wins. Strata cannot do this on a cluster: the DRA
	// allocator picks the first device that fits. It measures what device
	// scoring in the allocator would be worth.
	PolicyStrataGPUChoice = "strata-gpu-choice"
	// PolicyFGDGPUChoice is FGD choosing a share's GPU inside the node
	// as its authors' simulator does, among the same GPUs.
	PolicyFGDGPUChoice = "fgd-gpu-choice"
)

// ModelPolicies lists the model engine's policies that a replay runs by
// default; StudyPolicies those it runs only when asked.
var (
	ModelPolicies = []string{PolicyStrata, PolicyFGD, PolicyBestFit, PolicyRandom}
	StudyPolicies = []string{PolicyStrataGPUChoice, PolicyFGDGPUChoice}
)

// KnownPolicy says whether the model engine has the policy.
func KnownPolicy(p string) bool {
	return slices.Contains(ModelPolicies, p) || slices.Contains(StudyPolicies, p)
}

// ModelResult is one seed's replay.
type ModelResult struct {
	Seed   uint64
	Curve  *Curve
	Failed int
}

// RunModel replays one seed with the model engine: the fragment
// package's first-fit placement inside a node (the DRA allocator's) and a
// policy over nodes, with no Kubernetes components. It is the fast way to
// study a policy; the framework engine checks its figures through the
// real scheduler.
func RunModel(nodes []TraceNode, pods []TracePod, policy string, seed uint64) (*ModelResult, error) {
	if !KnownPolicy(policy) {
		return nil, fmt.Errorf("policy %q is not one of %v", policy, slices.Concat(ModelPolicies, StudyPolicies))
	}
	state := make([]fragment.Node, len(nodes))
	var total int64
	for i, n := range nodes {
		g := make([]int32, n.GPUs)
		for j := range g {
			g[j] = fragment.Whole
		}
		state[i] = fragment.Node{CPU: n.CPU, Memory: n.Memory << 20, Model: n.Model, GPUs: g}
		total += int64(n.GPUs) * fragment.Whole
	}
	var w *fragment.Workload
	switch policy {
	case PolicyStrata, PolicyStrataGPUChoice:
		w = TraceWorkload(pods, fragment.DefaultOptions)
	case PolicyFGD, PolicyFGDGPUChoice:
		w = TraceWorkload(pods, fragment.Options{Coverage: 0.95, UnreachableOnly: true})
	}
	frag := make([]float64, len(state))
	if w != nil {
		for i := range state {
			frag[i] = w.Fragmentation(&state[i])
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0xfeed))
	res := &ModelResult{Seed: seed, Curve: NewCurve(total)}
	for _, p := range Sample(pods, total, seed) {
		t := Task(p)
		best, bestFit := -1, fragment.Fit{}
		bestScore := math.Inf(-1)
		fits := 0
		for i := range state {
			n := &state[i]
			g, ok := fragment.FirstFit(n, t)
			if !ok {
				continue
			}
			var score float64
			switch policy {
			case PolicyStrata, PolicyFGD, PolicyStrataGPUChoice, PolicyFGDGPUChoice:
				choices := []fragment.Fit{g}
				if policy == PolicyStrataGPUChoice || policy == PolicyFGDGPUChoice {
					choices = shareChoices(n, t, g)
				}
				for _, c := range choices {
					fragment.Apply(n, t, c, 1)
					d := w.Fragmentation(n) - frag[i]
					fragment.Apply(n, t, c, -1)
					score = -d
					if policy == PolicyFGD || policy == PolicyFGDGPUChoice {
						score = math.Trunc(100 / (1 + math.Exp(d/1000)))
					}
					if score > bestScore {
						best, bestFit, bestScore = i, c, score
					}
				}
				continue
			case PolicyBestFit:
				score = -(float64(n.CPU-t.CPU)/128000 + float64(n.Idle()-t.GPUMilli())/8000)
			case PolicyRandom:
				fits++
				if rng.IntN(fits) == 0 {
					best, bestFit = i, g
				}
				continue
			}
			if score > bestScore {
				best, bestFit, bestScore = i, g, score
			}
		}
		if best >= 0 {
			fragment.Apply(&state[best], t, bestFit, 1)
			if w != nil {
				frag[best] = w.Fragmentation(&state[best])
			}
		} else {
			res.Failed++
		}
		res.Curve.Add(p, best >= 0)
	}
	return res, nil
}

// shareChoices returns the GPUs a share could take on the node, first
// fit's first and then one GPU per other free amount (GPUs with the same
// free amount leave the node in the same state); other tasks have only
// first fit's choice (free whole GPUs are all alike).
func shareChoices(n *fragment.Node, t fragment.Task, first fragment.Fit) []fragment.Fit {
	out := []fragment.Fit{first}
	if t.GPUs != 1 || t.Milli >= fragment.Whole || t.Profile != "" {
		return out
	}
	seen := []int32{n.GPUs[first.GPUs[0]]}
	for i, f := range n.GPUs {
		if f >= t.Milli && !slices.Contains(seen, f) {
			seen = append(seen, f)
			out = append(out, fragment.Fit{GPUs: []int{i}})
		}
	}
	return out
}

// Task is a trace pod as the fragment package sees it; memory in bytes.
func Task(p TracePod) fragment.Task {
	return fragment.Task{CPU: p.CPU, Memory: p.Memory << 20, GPUs: p.GPUs, Milli: int32(p.Milli), Models: p.Models}
}

// TraceWorkload is the expected mix as the trace's authors build it: the
// pod list's shapes by CPU, GPUs, share and models, weighted by how many
// pods have each. Memory is left out of the shapes: it bounds where a pod
// fits, not what a node is expected to host (with it the shapes split
// into many rare ones).
func TraceWorkload(pods []TracePod, o fragment.Options) *fragment.Workload {
	shapes := make([]fragment.Shape, 0, len(pods))
	for _, p := range pods {
		t := Task(p)
		t.Memory = 0
		shapes = append(shapes, fragment.Shape{Task: t, Weight: 1})
	}
	return fragment.NewWorkload(shapes, o)
}
