package sim

import (
	"context"
	"fmt"
	"io"
	"maps"
	"time"

	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/deployments/chart"
	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/cluster"
	"github.com/strata-sh/strata/sim/controlplane"
	"github.com/strata-sh/strata/sim/realnode"
)

// Report formats.
const (
	FormatTable = "table"
	FormatJSON  = "json"
)

// RunOptions are the options of "strata-sim run".
type RunOptions struct {
	ClusterFile string
	Manifests   []string
	// Then are later steps: each is applied once the cluster has settled
	// after the previous one (workloads that must be running before a
	// preemptor arrives, for example).
	Then []string
	// Once exits after the report; otherwise the cluster keeps serving
	// until ctx ends.
	Once bool
	// Format is FormatTable or FormatJSON.
	Format string
	// KubeconfigOut, if set, receives an admin kubeconfig.
	KubeconfigOut string
	// Timeout bounds the wait for pods to settle.
	Timeout time.Duration
	// Quiet is how long nothing may change before the cluster counts as
	// settled.
	Quiet time.Duration
	// Dir is the work directory ("" for a temporary one).
	Dir string
	// FeatureGates and RuntimeConfig add to (and override) the cluster
	// file's.
	FeatureGates  map[string]bool
	RuntimeConfig []string
	// ChartValues are Helm values files for the chart strata-sim
	// installs, later files over earlier ones (helm install -f).
	ChartValues []string
	// RealNodeTools is the folder of the real-node programs
	// (hack/realnode/install.sh) and PluginBinDir that of the plugin
	// binaries (make build); both are needed when the cluster file has
	// real node groups.
	RealNodeTools string
	PluginBinDir  string
	Out           io.Writer
}

// writeReport prints the report in the chosen format.
func (o *RunOptions) writeReport(ctx context.Context, s *Sim) error {
	r, err := s.Report(ctx)
	if err != nil {
		return err
	}
	if o.Format == FormatJSON {
		return r.WriteJSON(o.Out)
	}
	return r.WriteTable(o.Out)
}

// Validate checks options before anything starts.
func (o *RunOptions) Validate() error {
	if o.ClusterFile == "" {
		return fmt.Errorf("--cluster is required")
	}
	if o.Format != FormatTable && o.Format != FormatJSON {
		return fmt.Errorf("--report must be %q or %q, not %q", FormatTable, FormatJSON, o.Format)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive")
	}
	return nil
}

// Run is "strata-sim run": boot the cluster, apply the manifests, wait
// for the pods to settle, print the report, and (without Once) keep
// serving until ctx ends.
func Run(ctx context.Context, o RunOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	c, err := cluster.Load(o.ClusterFile)
	if err != nil {
		return err
	}
	// Read manifests before booting so that a typo fails in milliseconds.
	objs, err := apply.ReadPaths(o.Manifests)
	if err != nil {
		return err
	}
	steps := make([][]apply.Object, len(o.Then))
	for i, p := range o.Then {
		if steps[i], err = apply.ReadPaths([]string{p}); err != nil {
			return err
		}
	}
	gates := maps.Clone(c.FeatureGates)
	if gates == nil {
		gates = map[string]bool{}
	}
	maps.Copy(gates, o.FeatureGates)
	if err := controlplane.ValidateFeatureGates(gates); err != nil {
		return fmt.Errorf("feature gates: %w", err)
	}
	runtimeConfig := append(append([]string(nil), c.RuntimeConfig...), o.RuntimeConfig...)
	if err := controlplane.ValidateRuntimeConfig(runtimeConfig); err != nil {
		return err
	}
	values, err := chart.ReadValuesFiles(o.ChartValues)
	if err != nil {
		return err
	}
	var real *RealNodes
	if c.RealNodeCount() > 0 {
		tools, err := realnode.FindToolsIn(o.RealNodeTools)
		if err != nil {
			return fmt.Errorf("%s has real node groups: %w", o.ClusterFile, err)
		}
		real = &RealNodes{Tools: tools, PluginBinDir: o.PluginBinDir}
	}
	s, err := Start(ctx, Config{Cluster: c, Dir: o.Dir, ChartValues: values, RealNodes: real, ControlPlane: controlplane.Options{
		FeatureGates: gates, RuntimeConfig: controlplane.WithGateAPIs(gates, runtimeConfig)}})
	if err != nil {
		return err
	}
	defer s.Stop()
	if o.KubeconfigOut != "" {
		if err := s.ControlPlane.WriteKubeconfig(o.KubeconfigOut); err != nil {
			return err
		}
		logger.Info("Kubeconfig written", "path", o.KubeconfigOut)
	}
	for i, step := range append([][]apply.Object{objs}, steps...) {
		if err := s.Apply(ctx, step); err != nil {
			// What the earlier steps did is still worth seeing.
			if rerr := o.writeReport(ctx, s); rerr != nil {
				logger.Error(rerr, "Cannot write the report")
			}
			if i > 0 {
				return fmt.Errorf("step %d (--then %s): %w", i, o.Then[i-1], err)
			}
			return err
		}
		settled, err := s.WaitSettled(ctx, o.Quiet, o.Timeout)
		if err != nil {
			return err
		}
		if !settled {
			logger.Info("Pods did not settle before the timeout; going on with the current state", "step", i, "timeout", o.Timeout)
		}
	}
	if err := o.writeReport(ctx, s); err != nil || o.Once {
		return err
	}
	logger.Info("Serving until interrupted", "apiServer", s.ControlPlane.Config.Host)
	<-ctx.Done()
	return nil
}
