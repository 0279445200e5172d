package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/strata-sh/strata/sim/replay"
)

const replayUsage = `Usage: strata-sim replay --trace-dir DIR [--variant NAME ...] [--engine model|framework]
       [--policy NAME,... | --profile NAME ...] [--seeds 42-51] [--out DIR]
       strata-sim replay --merge DIR,DIR... --out DIR

Replays Alibaba's openb GPU-sharing traces in their authors' protocol
(pods drawn with replacement to 130 % of the cluster's GPUs, seeded order,
never deleted) and prints the unallocated GPU percent when arrivals reach
100 % of the cluster, per policy, median over the seeds.

The model engine (default) places pods with a --policy: Strata's
fragmentation measure (package fragment) and others, with the DRA
allocator's first fit inside a node, without Kubernetes components.
--policy strata-gpu-choice lets Strata's measure choose a share's GPU
inside the node too, which the DRA allocator does not allow: it
measures what device scoring would be worth.

The framework engine schedules every pod through kube-scheduler's
framework with a --profile (a KubeSchedulerConfiguration: default,
mostallocated, strata), the real DRA allocator and the ResourceSlices
Strata's NVIDIA plugin publishes, without an API server; GPUs are
ResourceClaims (whole GPUs, or shares of a GPU's cores and memory).

A --variant without a file in --trace-dir is derived from the default
pod list when its name says how (cpu250: CPU-only pods are 25 % of the
pods; gpushare80, multigpu40, gpuspec33: that kind of pod carries that
share of the GPU request), as the trace's description derives its
published variants; --variant beyond replays the derived variants that
lie beyond the published ranges.

--merge gathers the --out folders of several replays into one, with
every policy and profile of a variant on one plot.

Flags:
`

func runReplay(args []string) error {
	o := replay.Options{Out: os.Stdout}
	fs := newFlagSet("strata-sim replay", replayUsage, args)
	fs.StringVar(&o.TraceDir, "trace-dir", "", "folder with openb_node_list_gpu_node.csv and openb_pod_list_<variant>.csv")
	fs.StringSliceVar(&o.Variants, "variant", []string{"default"}, "pod lists to replay (openb_pod_list_<variant>.csv); \"all\" for every one in the folder, \"beyond\" for the variants derived beyond the published ranges (cpuNNN, gpushareNN, multigpuNN, gpuspecNN without a file are derived from default)")
	fs.StringSliceVar(&o.Policies, "policy", replay.ModelPolicies, "model engine policies: "+strings.Join(replay.ModelPolicies, ", ")+"; also "+strings.Join(replay.StudyPolicies, ", "))
	fs.StringSliceVar(&o.Profiles, "profile", replay.FrameworkProfiles, "framework engine profiles (repeatable): "+strings.Join(replay.FrameworkProfiles, ", "))
	seeds := fs.String("seeds", "42-51", "seeds, a range A-B or a list")
	fs.StringVar(&o.OutDir, "out", "", "folder for results.csv and curves.csv")
	fs.StringVar(&o.Engine, "engine", replay.EngineModel, "engine: model or framework")
	merge := fs.StringSlice("merge", nil, "--out folders of earlier replays to gather into --out, replaying nothing")
	fs.IntVar(&o.Until, "until", 130, "framework engine: stop each seed once arrivals reach this percent of the cluster's GPUs, 100 to 130; the figure at 100 % arrived is the same, the curve ends there")
	percentage := fs.Int32("percentage-of-nodes-to-score", 0, "framework engine: the share of nodes kube-scheduler searches for feasible ones and scores; 0 is its adaptive default, 100 every node (the trace authors' simulator); default: the profile's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if len(*merge) > 0 {
		if o.OutDir == "" {
			return fmt.Errorf("--merge needs --out")
		}
		rs, err := replay.Merge(*merge, o.OutDir)
		for _, r := range rs {
			fmt.Printf("%-12s %-24s median %5.2f %% unallocated at 100 %% arrived (%d seeds)\n", r.Variant, r.Policy, r.Median(), len(r.At100))
		}
		return err
	}
	if o.TraceDir == "" {
		return fmt.Errorf("--trace-dir is required")
	}
	if err := checkEngine(fs, &o); err != nil {
		return err
	}
	if fs.Changed("percentage-of-nodes-to-score") {
		if o.Engine != replay.EngineFramework {
			return fmt.Errorf("--percentage-of-nodes-to-score is for --engine framework")
		}
		if *percentage < 0 || *percentage > 100 {
			return fmt.Errorf("--percentage-of-nodes-to-score %d: want 0 (adaptive) to 100", *percentage)
		}
		o.PercentageOfNodesToScore = percentage
	}
	if fs.Changed("until") {
		if o.Engine != replay.EngineFramework {
			return fmt.Errorf("--until is for --engine framework")
		}
		if o.Until < 100 || o.Until > 130 {
			return fmt.Errorf("--until %d: want 100 to 130 (percent of the cluster's GPUs arrived)", o.Until)
		}
	}
	var err error
	if o.Seeds, err = parseSeeds(*seeds); err != nil {
		return fmt.Errorf("--seeds: %w", err)
	}
	var variants []string
	for _, v := range o.Variants {
		switch v {
		case "all":
			files, err := filepath.Glob(filepath.Join(o.TraceDir, "openb_pod_list_*.csv"))
			if err != nil {
				return err
			}
			for _, f := range files {
				variants = append(variants, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "openb_pod_list_"), ".csv"))
			}
		case "beyond":
			variants = append(variants, replay.BeyondVariants...)
		default:
			variants = append(variants, v)
		}
	}
	o.Variants = variants
	if o.Engine == replay.EngineFramework && os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// The DRA allocator allocates a great deal per node and pod, and
		// the live heap is small: collecting less often saves about a
		// fifth of the CPU time against Go's default. The heap may grow to
		// ten times the live one, within half of the machine's memory.
		debug.SetGCPercent(1000)
		var info syscall.Sysinfo_t
		if err := syscall.Sysinfo(&info); err == nil && info.Totalram > 0 {
			debug.SetMemoryLimit(int64(info.Totalram) * int64(info.Unit) / 2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = replay.Run(ctx, o)
	return err
}

// checkEngine validates --engine and the flag that names what it
// replays: --policy for the model engine, --profile for the framework
// engine; the other one is an error when given.
func checkEngine(fs *pflag.FlagSet, o *replay.Options) error {
	switch o.Engine {
	case replay.EngineModel:
		if fs.Changed("profile") {
			return fmt.Errorf("--profile is for --engine framework; the model engine takes --policy")
		}
		o.Profiles = nil
		for _, p := range o.Policies {
			if !replay.KnownPolicy(p) {
				return fmt.Errorf("--policy %q is not one of %v", p, slices.Concat(replay.ModelPolicies, replay.StudyPolicies))
			}
		}
	case replay.EngineFramework:
		if fs.Changed("policy") {
			return fmt.Errorf("--policy is for --engine model; the framework engine takes --profile (%s)", strings.Join(replay.FrameworkProfiles, ", "))
		}
		o.Policies = nil
		for _, p := range o.Profiles {
			if !slices.Contains(replay.FrameworkProfiles, p) {
				return fmt.Errorf("--profile %q is not one of %v", p, replay.FrameworkProfiles)
			}
		}
	default:
		return fmt.Errorf("--engine %q is not %s or %s", o.Engine, replay.EngineModel, replay.EngineFramework)
	}
	return nil
}

func parseSeeds(s string) ([]uint64, error) {
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, err1 := strconv.ParseUint(a, 10, 64)
		hi, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil || hi < lo {
			return nil, fmt.Errorf("%q is not a range A-B", s)
		}
		var out []uint64
		for v := lo; v <= hi; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}
