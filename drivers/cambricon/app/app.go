// Package app is the composition root of the Cambricon kubelet plugin.
// The cambricon-kubelet-plugin binary and strata-sim's simulated nodes
// both start the plugin through Start; they differ only in the Host they
// hand it (the real cnmon, or a fake of it) and in where the node's
// directories are.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/strata-sh/strata/drivers/cambricon"
	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
	"github.com/strata-sh/strata/hardware/simulated"
	"github.com/strata-sh/strata/internal/vendortool"
)

// Options are the plugin's settings, as its flags give them.
type Options struct {
	pluginmain.Options

	SysfsRoot string
	ProcRoot  string
	DevRoot   string
	// DevCharDir is where the kernel lists character devices by number;
	// empty means <sysfs-root>/dev/char (the simulator points it at the
	// node's own).
	DevCharDir string
	// CNMON is the host's cnmon program.
	CNMON string
	// SMLUMemoryUnit is the step of sMLU memory, a quantity ("256Mi").
	SMLUMemoryUnit string
	// VendorToolTimeout bounds each run of cnmon.
	VendorToolTimeout time.Duration
	// HealthInterval is how often every card's health is read.
	HealthInterval time.Duration
	// SMLUInfoArgs, SMLUCreateArgs and SMLUDestroyArgs are the argument
	// templates of cnmon's sMLU commands (cnmon.ParseSMLUSyntax). No
	// public capture of that syntax exists; the defaults are Strata's
	// guess, to be replaced by what the host's cnmon takes.
	SMLUInfoArgs, SMLUCreateArgs, SMLUDestroyArgs string
}

// NewOptions returns the defaults of a plugin on a real node.
func NewOptions() Options {
	return Options{
		Options:        pluginmain.NewOptions(cambricon.DriverName, ":9404"),
		SysfsRoot:      "/sys",
		ProcRoot:       "/proc",
		DevRoot:        "/",
		CNMON:          cnmon.DefaultBinary,
		SMLUMemoryUnit: "256Mi",

		VendorToolTimeout: vendortool.DefaultTimeout,
		HealthInterval:    cambricon.DefaultHealthInterval,
		SMLUInfoArgs:      cnmon.DefaultSMLUInfoArgs,
		SMLUCreateArgs:    cnmon.DefaultSMLUCreateArgs,
		SMLUDestroyArgs:   cnmon.DefaultSMLUDestroyArgs,
	}
}

// AddFlags binds the options to flags, with the current values as
// defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.StringVar(&o.SysfsRoot, "sysfs-root", o.SysfsRoot, "where the host's sysfs is mounted")
	fs.StringVar(&o.ProcRoot, "proc-root", o.ProcRoot, "where the host's procfs is mounted (device majors)")
	fs.StringVar(&o.DevRoot, "dev-root", o.DevRoot, "prefix of host device node paths")
	fs.StringVar(&o.CNMON, "cnmon", o.CNMON, "the host's cnmon program: cards, sMLU mode and instances; mounted into containers unless a claim's MluConfig says cnmon: None")
	fs.DurationVar(&o.VendorToolTimeout, "vendor-tool-timeout", o.VendorToolTimeout, "deadline of each cnmon run; one that takes longer is killed with the processes it forked and fails")
	fs.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "how often cnmon info is read for each card's Health State; a card not Good and Running, or one cnmon cannot query, is tainted "+cambricon.TaintUnhealthy)
	fs.StringVar(&o.SMLUInfoArgs, "smlu-info-args", o.SMLUInfoArgs, "EXPERIMENTAL: cnmon arguments that list a card's sMLU mode and instances, with {card}; no public capture of cnmon's sMLU syntax exists, set what the host's cnmon takes")
	fs.StringVar(&o.SMLUCreateArgs, "smlu-create-args", o.SMLUCreateArgs, "EXPERIMENTAL: cnmon arguments that create an sMLU, with {card}, {vcore} (percent) and {memoryMiB}")
	fs.StringVar(&o.SMLUDestroyArgs, "smlu-destroy-args", o.SMLUDestroyArgs, "EXPERIMENTAL: cnmon arguments that destroy an sMLU, with {card} and {id}")
	fs.StringVar(&o.SMLUMemoryUnit, "smlu-memory-unit", o.SMLUMemoryUnit, "step of sMLU memory (vmemory), a whole number of MiB; Cambricon's device plugin counts vmemory in 256Mi units")
}

// memoryUnit parses SMLUMemoryUnit.
func (o Options) memoryUnit() (int64, error) {
	q, err := resource.ParseQuantity(o.SMLUMemoryUnit)
	if err != nil {
		return 0, fmt.Errorf("--smlu-memory-unit %q: %w", o.SMLUMemoryUnit, err)
	}
	if v := q.Value(); v < 1<<20 || v%(1<<20) != 0 {
		return 0, fmt.Errorf("--smlu-memory-unit %q is not a positive whole number of MiB", o.SMLUMemoryUnit)
	}
	return q.Value(), nil
}

// smluSyntax parses the --smlu-*-args templates.
func (o Options) smluSyntax() (cnmon.SMLUSyntax, error) {
	s, err := cnmon.ParseSMLUSyntax(o.SMLUInfoArgs, o.SMLUCreateArgs, o.SMLUDestroyArgs)
	if err != nil {
		return s, fmt.Errorf("--smlu-info-args, --smlu-create-args, --smlu-destroy-args: %w", err)
	}
	return s, nil
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	errs := []error{o.Options.Validate()}
	if o.CNMON == "" {
		errs = append(errs, errors.New("--cnmon is required"))
	}
	if o.HealthInterval <= 0 {
		errs = append(errs, fmt.Errorf("--health-interval must be positive, not %s", o.HealthInterval))
	}
	if o.VendorToolTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--vendor-tool-timeout must be positive, not %s", o.VendorToolTimeout))
	}
	if _, err := o.memoryUnit(); err != nil {
		errs = append(errs, err)
	}
	if _, err := o.smluSyntax(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Host is what the plugin drives on its machine. A nil CNMON runs the
// program Options name.
type Host struct {
	CNMON cnmon.Runner
	// Events, if set, sends the plugin's events (a process running many
	// plugins shares one broadcaster).
	Events record.EventBroadcaster
}

// Start reads the node's cards, recovers the checkpoint and starts
// serving DRA and publishing ResourceSlices.
func Start(ctx context.Context, o Options, client kubernetes.Interface, host Host) (*plugin.Driver, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	unit, _ := o.memoryUnit()
	syntax, _ := o.smluSyntax()
	runner := host.CNMON
	if runner == nil {
		runner = cnmon.Exec{Binary: o.CNMON, Timeout: o.VendorToolTimeout}
	}
	backend, err := cambricon.New(ctx, cambricon.Config{
		Tool:       &cnmon.Client{Runner: runner, SMLU: syntax},
		SysfsRoot:  o.SysfsRoot,
		ProcRoot:   o.ProcRoot,
		DevRoot:    o.DevRoot,
		DevCharDir: o.DevCharDir,
		StateDir:   o.PluginDataDir,
		MemoryUnit: unit,
		// Containers see cnmon at the host path the chart mounts it at
		// in the plugin's pod.
		CNMON:          o.CNMON,
		HealthInterval: o.HealthInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("Cambricon backend: %w", err)
	}
	return plugin.Start(ctx, o.Config(cambricon.DriverName, backend, client, host.Events))
}

// Run is the cambricon-kubelet-plugin binary: the plugin on the real
// host, with metrics, until ctx ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	host := Host{}
	if o.Simulate != "" {
		m, err := simulated.ForPlugin(o.PluginDataDir, o.Simulate, o.NodeName, o.BootIDPath, simulated.Cambricon)
		if err != nil {
			return err
		}
		o.SysfsRoot, o.ProcRoot, o.DevRoot = m.SysfsRoot(), m.ProcRoot(), m.DevRoot()
		o.CNMON = m.Path(simulated.CambriconCNMON)
		// The sMLU capability nodes, listed as the kernel lists them.
		o.DevCharDir = m.DevCharDir()
		host.CNMON = m.CNMON
	}
	return pluginmain.Serve(ctx, o.Options, func(ctx context.Context, client kubernetes.Interface) (pluginmain.Stopper, error) {
		return Start(ctx, o, client, host)
	})
}
