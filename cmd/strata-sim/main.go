// Command strata-sim runs a Kubernetes cluster with Strata in one process:
// a real API server and scheduler, simulated nodes with Strata's kubelet
// plugins on fake hardware, and a report of where every pod and device
// landed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/controlplane"
	"github.com/strata-sh/strata/sim/realnode"
)

const commandsUsage = `strata-sim runs a Kubernetes cluster with Strata in one process: a real
API server and scheduler, simulated nodes, and a report of where
every pod and device landed.

Usage: strata-sim COMMAND [flags]

Commands:
  run      boot a cluster, apply manifests, report where everything landed
  replay   replay Alibaba's openb GPU-sharing traces through Strata's scheduling

Run "strata-sim COMMAND --help" for a command's flags.
`

const usage = `Usage: strata-sim run --cluster CLUSTER.yaml -f MANIFEST [-f MANIFEST ...] [--then MANIFEST ...] [flags]

Boots a simulated cluster, applies the manifests, waits for pods to settle
(then applies each --then step and waits again) and prints where
everything landed. Without --once it keeps serving; use
--kubeconfig-out to point kubectl at it.

Flags:
`

func main() {
	err := run(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "strata-sim:", err)
		os.Exit(1)
	}
}

// run runs a command. Asked for help (strata-sim --help, help, or a
// command's --help) it prints the usage on standard output and returns
// pflag.ErrHelp, which is a success, as kubectl-style tools do.
func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, commandsUsage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, commandsUsage)
		return pflag.ErrHelp
	case "replay":
		return runReplay(args[1:])
	case "run":
	default:
		fmt.Fprint(os.Stderr, commandsUsage)
		return fmt.Errorf("unknown command %q", args[0])
	}
	opts := sim.RunOptions{Out: os.Stdout}
	fs := newFlagSet("strata-sim run", usage, args[1:])
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
	fs.StringVar(&opts.RealNodeTools, "realnode-tools", os.Getenv(realnode.ToolsEnv), "folder of containerd, its shim, ctr and kubelet for real node groups (hack/realnode/install.sh prints it; default $"+realnode.ToolsEnv+")")
	fs.StringVar(&opts.PluginBinDir, "plugin-bin-dir", "bin", "folder of the kubelet plugin binaries (make build) that real nodes run as images")
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

// newFlagSet is a command's flag set; its usage goes to standard output
// when args ask for help, to standard error on a wrong flag.
func newFlagSet(name, usage string, args []string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" }) {
		fs.SetOutput(os.Stdout)
	}
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	return fs
}
