package replay

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Options say what to replay.
type Options struct {
	// TraceDir holds openb_node_list_gpu_node.csv and
	// openb_pod_list_<variant>.csv.
	TraceDir string
	Variants []string
	// Engine is EngineModel (the default) or EngineFramework.
	Engine string
	// Policies are the model engine's, Profiles the framework engine's.
	Policies []string
	Profiles []string
	Seeds    []uint64
	// OutDir, if set, receives curves.csv, results.csv and a
	// curve-<variant>.png per variant.
	OutDir string
	Out    io.Writer
	// PercentageOfNodesToScore, if set, overrides the framework engine
	// profiles' (by default kube-scheduler's adaptive share; 100 filters
	// and scores every node, as the trace authors' simulator does).
	PercentageOfNodesToScore *int32
	// Until is the arrived GPU percent at which the framework engine
	// stops a seed: 100 to 130; 0 is the whole protocol (130). The figure
	// at 100 % arrived does not depend on it.
	Until int
}

// Result is one policy's replay of one variant.
type Result struct {
	// Policy is a model engine policy, or framework/<profile>.
	Variant, Policy string
	// At100 is the unallocated GPU percent at 100 % arrived, per seed.
	At100 []float64
	// Curve is the median over seeds of the unallocated GPU percent at
	// each whole arrived percent.
	Curve   []float64
	Elapsed time.Duration
}

// Median of At100.
func (r Result) Median() float64 { return median(r.At100) }

// seedRun replays one seed.
type seedRun func(seed uint64, parallelism int) (*ModelResult, error)

// Run replays every variant under every policy (model engine) or profile
// (framework engine) and seed, the seeds of one policy in parallel.
func Run(ctx context.Context, o Options) ([]Result, error) {
	nodes, err := ReadNodes(filepath.Join(o.TraceDir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		return nil, err
	}
	var cluster *Cluster
	names := o.Policies
	switch o.Engine {
	case "", EngineModel:
	case EngineFramework:
		// A profile that cannot load fails the run before any replay.
		for _, p := range o.Profiles {
			if _, err := profileWith(p, o.PercentageOfNodesToScore); err != nil {
				return nil, err
			}
		}
		if cluster, err = BuildCluster(ctx, nodes); err != nil {
			return nil, err
		}
		names = o.Profiles
	default:
		return nil, fmt.Errorf("engine %q is not %s or %s", o.Engine, EngineModel, EngineFramework)
	}
	var out []Result
	var outMu sync.Mutex // the framework engine reports each seed
	for _, v := range o.Variants {
		pods, err := LoadPods(o.TraceDir, v)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			label, run := name, seedRun(func(seed uint64, _ int) (*ModelResult, error) { return RunModel(nodes, pods, name, seed) })
			if cluster != nil {
				label = EngineFramework + "/" + name
				run = func(seed uint64, parallelism int) (*ModelResult, error) {
					r, err := RunFramework(ctx, cluster, pods, name, o.PercentageOfNodesToScore, cmp.Or(o.Until, 130), seed, parallelism)
					if err != nil {
						return nil, err
					}
					if o.Out != nil {
						outMu.Lock()
						fmt.Fprintf(o.Out, "%-12s %s seed %d: %.2f %% unallocated at 100 %% arrived, %d pods unplaced\n", v, label, seed, r.Curve.At100, r.Failed)
						if r.Errors > 0 {
							fmt.Fprintf(o.Out, "%s %s seed %d: %d pods failed on scheduler errors, first: %v\n", v, label, seed, r.Errors, r.FirstErrors[0])
						}
						outMu.Unlock()
					}
					return &r.ModelResult, nil
				}
			}
			r, err := replaySeeds(o.Seeds, run)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", v, label, err)
			}
			r.Variant, r.Policy = v, label
			out = append(out, r)
			if o.Out != nil {
				fmt.Fprintf(o.Out, "%-12s %-8s median %5.2f %% unallocated at 100 %% arrived (seeds: %s) in %s\n",
					v, label, r.Median(), formatAll(r.At100), r.Elapsed.Round(time.Second))
			}
		}
	}
	if o.OutDir != "" {
		if err := writeResults(o.OutDir, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// replaySeeds runs the seeds in parallel, as many at a time as there are
// CPUs, and sums them up. Each run gets a share of the CPUs for its own
// parallel work.
func replaySeeds(seeds []uint64, run seedRun) (Result, error) {
	start := time.Now()
	cpus := runtime.GOMAXPROCS(0)
	parallelism := max(1, cpus/max(1, min(len(seeds), cpus)))
	res := make([]*ModelResult, len(seeds))
	errs := make([]error, len(seeds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, cpus)
	for i, s := range seeds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res[i], errs[i] = run(s, parallelism)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	r := Result{Elapsed: time.Since(start), Curve: make([]float64, 131)}
	curves := make([][]float64, len(res))
	for i, m := range res {
		r.At100 = append(r.At100, m.Curve.At100)
		curves[i] = m.Curve.Unallocated()
	}
	for b := range r.Curve {
		var at []float64
		for _, c := range curves {
			if !math.IsNaN(c[b]) {
				at = append(at, c[b])
			}
		}
		r.Curve[b] = median(at)
	}
	return r, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return (s[len(s)/2] + s[(len(s)-1)/2]) / 2
}

func formatAll(v []float64) string {
	out := ""
	for i, x := range v {
		if i > 0 {
			out += " "
		}
		out += strconv.FormatFloat(x, 'f', 2, 64)
	}
	return out
}

// writeResults writes results.csv, curves.csv and a curve-<variant>.png per
// variant into dir.
func writeResults(dir string, rs []Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"workload", "policy", "n_seeds", "unalloc_gpu_pct_median", "unalloc_gpu_pct_per_seed", "seconds"})
	for _, r := range rs {
		w.Write([]string{r.Variant, r.Policy, strconv.Itoa(len(r.At100)), strconv.FormatFloat(r.Median(), 'f', 3, 64), formatAll(r.At100), strconv.FormatFloat(r.Elapsed.Seconds(), 'f', 1, 64)})
	}
	w.Flush()
	if err := cmp.Or(w.Error(), f.Close()); err != nil {
		return err
	}
	f, err = os.Create(filepath.Join(dir, "curves.csv"))
	if err != nil {
		return err
	}
	w = csv.NewWriter(f)
	w.Write([]string{"workload", "policy", "arrived_pct", "unalloc_gpu_pct_median"})
	for _, r := range rs {
		for b, v := range r.Curve {
			if !math.IsNaN(v) {
				w.Write([]string{r.Variant, r.Policy, strconv.Itoa(b), strconv.FormatFloat(v, 'f', 3, 64)})
			}
		}
	}
	w.Flush()
	if err := cmp.Or(w.Error(), f.Close()); err != nil {
		return err
	}
	var variants []string
	for _, r := range rs {
		if !slices.Contains(variants, r.Variant) {
			variants = append(variants, r.Variant)
		}
	}
	for _, v := range variants {
		if err := writePlot(filepath.Join(dir, "curve-"+v+".png"), v, rs); err != nil {
			return err
		}
	}
	return nil
}
