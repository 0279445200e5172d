// Command strata-sim runs a Kubernetes cluster with Strata in one process:
// a real API server and scheduler, simulated nodes with Strata's kubelet
// plugins on fake hardware, and a report of where every pod and device
// landed.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/controlplane"
)

const usage = `Usage: strata-sim run --cluster CLUSTER.yaml -f MANIFEST [-f MANIFEST ...] [--then MANIFEST ...] [flags]

Boots a simulated cluster, applies the manifests, waits for pods to settle
(then applies each --then step and waits again) and prints where
everything landed. Without --once it keeps serving; use
--kubeconfig-out to point kubectl at it.

Flags:
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "strata-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "replay" {
		return runReplay(args[1:])
	}
	if len(args) == 0 || args[0] != "run" {
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown or missing command; the commands are \"run\" and \"replay\"")
	}
	opts := sim.RunOptions{Out: os.Stdout}
	fs := pflag.NewFlagSet("strata-sim run", pflag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage); fs.PrintDefaults() }
	fs.StringVar(&opts.ClusterFile, "cluster", "", "cluster file (node groups and hardware)")
	fs.StringArrayVarP(&opts.Manifests, "filename", "f", nil, "manifest file or directory to apply (repeatable)")
	fs.StringArrayVar(&opts.Then, "then", nil, "manifest file or directory to apply once the cluster has settled after the previous step (repeatable, in order)")
	fs.BoolVar(&opts.Once, "once", false, "exit after printing the report")
	fs.StringVar(&opts.Format, "report", sim.FormatTable, "report format: table or json")
	fs.StringVar(&opts.KubeconfigOut, "kubeconfig-out", "", "write an admin kubeconfig for the simulated cluster")
	fs.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "longest wait for pods to settle")
	fs.DurationVar(&opts.Quiet, "quiet", 2*time.Second, "how long the cluster must be unchanged to count as settled")
	fs.StringVar(&opts.Dir, "work-dir", "", "work directory (default: a new temporary directory, removed on exit)")
	gates := fs.String("feature-gates", "", "Kubernetes feature gates for the whole control plane, Name=true|false,... (over the cluster file's featureGates)")
	fs.StringSliceVar(&opts.RuntimeConfig, "runtime-config", nil, "API versions to serve or not, group/version=true|false,... (added to the cluster file's runtimeConfig)")
	fs.StringArrayVar(&opts.ChartValues, "values", nil, "Helm values file for the Strata chart the cluster installs (repeatable; later files win), as helm install -f")
	verbosity := fs.IntP("verbosity", "v", -1, "log verbosity; below 0 logs nothing")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	var err error
	if opts.FeatureGates, err = controlplane.ParseFeatureGates(*gates); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	setupLogging(*verbosity)
	sim.TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer klog.Flush()
	return sim.Run(ctx, opts)
}
