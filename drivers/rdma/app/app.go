// Package app is the composition root of the RDMA kubelet plugin. The
// rdma-kubelet-plugin binary and strata-sim's simulated nodes both start
// the plugin through Start; they differ only in the Host they hand it
// (netlink, or a recording fake of it) and in where the node's
// directories are.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware/simulated"
	"github.com/strata-sh/strata/internal/linkctl"
)

// Options are the plugin's settings, as its flags give them.
type Options struct {
	pluginmain.Options

	SysfsRoot string
	DevRoot   string
	// RailDevices lists the physical functions' RDMA devices in rail
	// order, comma-separated; empty numbers rails in PCI address order.
	RailDevices    string
	HealthInterval time.Duration
}

// NewOptions returns the defaults of a plugin on a real node.
func NewOptions() Options {
	return Options{
		Options:        pluginmain.NewOptions(rdma.DriverName, ":9402"),
		SysfsRoot:      "/sys",
		DevRoot:        "/",
		HealthInterval: rdma.DefaultHealthInterval,
	}
}

// AddFlags binds the options to flags, with the current values as
// defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.StringVar(&o.SysfsRoot, "sysfs-root", o.SysfsRoot, "where the host's sysfs is mounted")
	fs.StringVar(&o.DevRoot, "dev-root", o.DevRoot, "prefix of host device node paths")
	fs.StringVar(&o.RailDevices, "rail-devices", o.RailDevices, "RDMA devices of the NICs' physical functions in rail order, comma-separated (e.g. mlx5_0,mlx5_3,...); "+
		"published as the rail attribute. Empty numbers rails in PCI address order")
	fs.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "how often port states are read; a port that is not ACTIVE is tainted")
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	errs := []error{o.Options.Validate()}
	if o.HealthInterval <= 0 {
		errs = append(errs, fmt.Errorf("--health-interval must be positive, not %s", o.HealthInterval))
	}
	for _, r := range o.rails() {
		if r == "" || strings.ContainsAny(r, " /") {
			errs = append(errs, fmt.Errorf("--rail-devices: %q is not an RDMA device name", r))
		}
	}
	return errors.Join(errs...)
}

func (o Options) rails() []string {
	if o.RailDevices == "" {
		return nil
	}
	return strings.Split(o.RailDevices, ",")
}

// Host is what the plugin drives on its machine. Nil fields are the real
// host: netlink.
type Host struct {
	Links linkctl.Control
	// Events, if set, sends the plugin's events (a process running many
	// plugins shares one broadcaster).
	Events record.EventBroadcaster
}

// Start discovers the node's RDMA devices, recovers the checkpoint and
// starts serving DRA and publishing ResourceSlices.
func Start(ctx context.Context, o Options, client kubernetes.Interface, host Host) (*plugin.Driver, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	links := host.Links
	if links == nil {
		links = linkctl.Netlink{}
	}
	backend, err := rdma.New(rdma.Config{
		SysfsRoot:      o.SysfsRoot,
		DevRoot:        o.DevRoot,
		Links:          links,
		RailDevices:    o.rails(),
		HealthInterval: o.HealthInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("RDMA backend: %w", err)
	}
	return plugin.Start(ctx, o.Config(rdma.DriverName, backend, client, host.Events))
}

// Run is the rdma-kubelet-plugin binary: the plugin on the real host,
// with metrics, until ctx ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	host := Host{}
	if o.Simulate != "" {
		m, err := simulated.ForPlugin(o.PluginDataDir, o.Simulate, o.NodeName, o.BootIDPath, simulated.RDMA)
		if err != nil {
			return err
		}
		o.SysfsRoot, o.DevRoot = m.SysfsRoot(), m.DevRoot()
		host.Links = m.Links
	}
	return pluginmain.Serve(ctx, o.Options, func(ctx context.Context, client kubernetes.Interface) (pluginmain.Stopper, error) {
		return Start(ctx, o, client, host)
	})
}
