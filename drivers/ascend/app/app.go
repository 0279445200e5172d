// Package app is the composition root of the Ascend kubelet plugin. The
// ascend-kubelet-plugin binary and strata-sim's simulated nodes both start
// the plugin through Start; they differ only in the Host they hand it
// (the real npu-smi, or a fake of it) and in where the node's directories
// are.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/strata-sh/strata/drivers/ascend"
	"github.com/strata-sh/strata/drivers/ascend/npusmi"
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
	// NPUSMI is the npu-smi program; DriverRoot the Ascend driver's
	// install root, whose libraries npu-smi loads.
	NPUSMI     string
	DriverRoot string
	// DCMIDir is the host's DCMI library folder, mounted into containers
	// with the driver.
	DCMIDir string
	// VendorToolTimeout bounds each run of npu-smi.
	VendorToolTimeout time.Duration
	// HealthInterval is how often every chip's health is read.
	HealthInterval time.Duration
}

// NewOptions returns the defaults of a plugin on a real node.
func NewOptions() Options {
	return Options{
		Options:    pluginmain.NewOptions(ascend.DriverName, ":9403"),
		SysfsRoot:  "/sys",
		ProcRoot:   "/proc",
		DevRoot:    "/",
		NPUSMI:     npusmi.DefaultBinary,
		DriverRoot: "/usr/local/Ascend/driver",
		DCMIDir:    "/usr/local/dcmi",

		VendorToolTimeout: vendortool.DefaultTimeout,
		HealthInterval:    ascend.DefaultHealthInterval,
	}
}

// AddFlags binds the options to flags, with the current values as
// defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.StringVar(&o.SysfsRoot, "sysfs-root", o.SysfsRoot, "where the host's sysfs is mounted")
	fs.StringVar(&o.ProcRoot, "proc-root", o.ProcRoot, "where the host's procfs is mounted (device majors)")
	fs.StringVar(&o.DevRoot, "dev-root", o.DevRoot, "prefix of host device node paths")
	fs.StringVar(&o.NPUSMI, "npu-smi", o.NPUSMI, "the npu-smi program of the host's Ascend driver: chips, vNPU templates, vNPU creation")
	fs.StringVar(&o.DCMIDir, "dcmi-dir", o.DCMIDir, "host folder of the DCMI library, mounted into containers with the driver (empty: not mounted)")
	fs.DurationVar(&o.VendorToolTimeout, "vendor-tool-timeout", o.VendorToolTimeout, "deadline of each npu-smi run; one that takes longer is killed with the processes it forked and fails")
	fs.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "how often npu-smi is asked for each chip's health; a chip in Alarm or Critical, or one npu-smi cannot query, is tainted "+ascend.TaintUnhealthy)
	fs.StringVar(&o.DriverRoot, "driver-root", o.DriverRoot, "install root of the host's Ascend driver; npu-smi runs with its lib64 folders on LD_LIBRARY_PATH (empty: as the plugin's environment has it)")
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	errs := []error{o.Options.Validate()}
	if o.NPUSMI == "" {
		errs = append(errs, errors.New("--npu-smi is required"))
	}
	if o.HealthInterval <= 0 {
		errs = append(errs, fmt.Errorf("--health-interval must be positive, not %s", o.HealthInterval))
	}
	if o.VendorToolTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--vendor-tool-timeout must be positive, not %s", o.VendorToolTimeout))
	}
	return errors.Join(errs...)
}

// Host is what the plugin drives on its machine. A nil NPUSMI runs the
// program Options name.
type Host struct {
	NPUSMI npusmi.Runner
	// Events, if set, sends the plugin's events (a process running many
	// plugins shares one broadcaster).
	Events record.EventBroadcaster
}

// Start reads the node's NPUs and templates, recovers the checkpoint and
// starts serving DRA and publishing ResourceSlices.
func Start(ctx context.Context, o Options, client kubernetes.Interface, host Host) (*plugin.Driver, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	runner := host.NPUSMI
	if runner == nil {
		runner = npusmi.Exec{Binary: o.NPUSMI, DriverRoot: o.DriverRoot, Timeout: o.VendorToolTimeout}
	}
	backend, err := ascend.New(ctx, ascend.Config{
		Tool:      &npusmi.Client{Runner: runner},
		SysfsRoot: o.SysfsRoot,
		ProcRoot:  o.ProcRoot,
		DevRoot:   o.DevRoot,
		StateDir:  o.PluginDataDir,
		// Containers see the driver at the host paths the chart mounts
		// it at in the plugin's pod.
		DriverRoot: o.DriverRoot,
		NPUSMI:     o.NPUSMI,
		DCMIDir:    o.DCMIDir,

		HealthInterval: o.HealthInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("Ascend backend: %w", err)
	}
	return plugin.Start(ctx, o.Config(ascend.DriverName, backend, client, host.Events))
}

// Run is the ascend-kubelet-plugin binary: the plugin on the real host,
// with metrics, until ctx ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	host := Host{}
	if o.Simulate != "" {
		m, err := simulated.ForPlugin(o.PluginDataDir, o.Simulate, o.NodeName, o.BootIDPath, simulated.Ascend)
		if err != nil {
			return err
		}
		o.SysfsRoot, o.ProcRoot, o.DevRoot = m.SysfsRoot(), m.ProcRoot(), m.DevRoot()
		o.NPUSMI, o.DriverRoot, o.DCMIDir = m.Path(simulated.AscendNPUSMI), m.Path(simulated.AscendDriverRoot), m.Path(simulated.AscendDCMI)
		host.NPUSMI = m.NPUSMI
	}
	return pluginmain.Serve(ctx, o.Options, func(ctx context.Context, client kubernetes.Interface) (pluginmain.Stopper, error) {
		return Start(ctx, o, client, host)
	})
}
