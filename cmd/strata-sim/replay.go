package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/strata-sh/strata/sim/replay"
)

const replayUsage = `Usage: strata-sim replay --trace-dir DIR [--variant NAME ...] [--policy NAME,...] [--seeds 42-51] [--out DIR]

Replays Alibaba's openb GPU-sharing traces in their authors' protocol
(pods drawn with replacement to 130 % of the cluster's GPUs, seeded order,
never deleted) and prints the unallocated GPU percent when arrivals reach
100 % of the cluster, per policy, median over the seeds. The model engine
places pods with Strata's fragmentation measure (package fragment) and
the DRA allocator's first fit inside a node, without Kubernetes
components.

Flags:
`

func runReplay(args []string) error {
	o := replay.Options{Out: os.Stdout}
	fs := pflag.NewFlagSet("strata-sim replay", pflag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, replayUsage); fs.PrintDefaults() }
	fs.StringVar(&o.TraceDir, "trace-dir", "", "folder with openb_node_list_gpu_node.csv and openb_pod_list_<variant>.csv")
	fs.StringSliceVar(&o.Variants, "variant", []string{"default"}, "pod lists to replay (openb_pod_list_<variant>.csv); \"all\" for every one in the folder")
	fs.StringSliceVar(&o.Policies, "policy", replay.ModelPolicies, "policies: "+strings.Join(replay.ModelPolicies, ", "))
	seeds := fs.String("seeds", "42-51", "seeds, a range A-B or a list")
	fs.StringVar(&o.OutDir, "out", "", "folder for results.csv and curves.csv")
	engine := fs.String("engine", "model", "model (the only engine so far)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.TraceDir == "" {
		return fmt.Errorf("--trace-dir is required")
	}
	if *engine != "model" {
		return fmt.Errorf("--engine %q: the only engine is model", *engine)
	}
	for _, p := range o.Policies {
		if !slices.Contains(replay.ModelPolicies, p) {
			return fmt.Errorf("--policy %q is not one of %v", p, replay.ModelPolicies)
		}
	}
	var err error
	if o.Seeds, err = parseSeeds(*seeds); err != nil {
		return fmt.Errorf("--seeds: %w", err)
	}
	if slices.Contains(o.Variants, "all") {
		files, err := filepath.Glob(filepath.Join(o.TraceDir, "openb_pod_list_*.csv"))
		if err != nil {
			return err
		}
		o.Variants = nil
		for _, f := range files {
			o.Variants = append(o.Variants, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "openb_pod_list_"), ".csv"))
		}
	}
	_, err = replay.Run(o)
	return err
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
