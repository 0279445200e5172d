// Package pluginmain is the harness of Strata's kubelet plugin binaries:
// the settings and flags every plugin takes (Options), the main function
// (Main) with its probe command, and the main loop (Serve) that connects
// to the API server and serves metrics. It builds the plugin core's
// Config from the flags; the core (package plugin) does not import it.
// A vendor's composition root (drivers/<vendor>/app) embeds Options.
package pluginmain

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/strata-sh/strata/drivers/plugin"
)

// Options are the settings every vendor's kubelet plugin binary takes,
// with their flags. A vendor's options embed them.
type Options struct {
	// NodeName is required; NodeUID is optional.
	NodeName string
	NodeUID  types.UID
	// PodUID is the UID of the plugin's pod; set, the DaemonSet may be
	// updated with maxSurge, the new pod starting beside the old one.
	// Empty means one plugin pod per node at a time.
	PodUID types.UID
	// Kubeconfig is used by Serve; empty means the in-cluster
	// configuration.
	Kubeconfig string

	PluginDataDir string
	RegistrarDir  string
	CDIDir        string
	BootIDPath    string
	// MetricsAddress is served by Serve; empty disables.
	MetricsAddress string
	// Simulate names a hardware preset (package hardware) to run on
	// instead of the node's devices; the vendor's app builds the machine
	// (package hardware/simulated) and the published devices carry the
	// simulated attribute. Empty runs on the node's hardware.
	Simulate string
}

// NewOptions returns the defaults of a driver's plugin on a real node.
func NewOptions(driver, metricsAddress string) Options {
	return Options{
		NodeName:       os.Getenv("NODE_NAME"),
		PodUID:         types.UID(os.Getenv("POD_UID")),
		PluginDataDir:  filepath.Join(kubeletplugin.KubeletPluginsDir, driver),
		RegistrarDir:   kubeletplugin.KubeletRegistryDir,
		CDIDir:         "/var/run/cdi",
		BootIDPath:     plugin.DefaultBootIDPath,
		MetricsAddress: metricsAddress,
	}
}

// AddFlags binds the options to flags, with the current values as
// defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of this node (default $NODE_NAME)")
	fs.StringVar((*string)(&o.PodUID), "pod-uid", string(o.PodUID), "UID of this plugin's pod, from the downward API (default $POD_UID); "+
		"enables rolling updates of the DaemonSet with maxSurge (kubelet 1.33 or later): the new pod starts and serves beside the old one, "+
		"both coordinating through a lock in --plugin-data-dir. Empty means no rolling-update support: one plugin pod per node at a time "+
		"(maxSurge 0)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; in-cluster configuration if empty")
	fs.StringVar(&o.PluginDataDir, "plugin-data-dir", o.PluginDataDir, "directory for the DRA socket and the checkpoint")
	fs.StringVar(&o.RegistrarDir, "registrar-dir", o.RegistrarDir, "kubelet plugin registration directory")
	fs.StringVar(&o.CDIDir, "cdi-dir", o.CDIDir, "CDI spec directory of the container runtime")
	fs.StringVar(&o.BootIDPath, "boot-id-path", o.BootIDPath, "file holding the host's boot id")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "address to serve Prometheus metrics on; empty disables")
	fs.StringVar(&o.Simulate, "simulate", o.Simulate, "run on a simulated machine of this hardware preset (e.g. nvidia-dgx-h100) instead of the node's devices, "+
		"to try Strata on a cluster without accelerators; refused on a node where the vendor's devices are found. The devices published say simulated: true")
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name or $NODE_NAME is required"))
	}
	if strings.Contains(string(o.PodUID), "/") {
		errs = append(errs, fmt.Errorf("--pod-uid %q must not contain a slash: it becomes part of socket file names", o.PodUID))
	}
	return errors.Join(errs...)
}

// Config is the plugin configuration these options give a backend.
func (o Options) Config(driver string, backend plugin.Backend, client kubernetes.Interface, events record.EventBroadcaster) plugin.Config {
	return plugin.Config{
		DriverName:       driver,
		NodeName:         o.NodeName,
		NodeUID:          o.NodeUID,
		KubeClient:       client,
		RollingUpdateUID: o.PodUID,
		Backend:          backend,
		PluginDataDir:    o.PluginDataDir,
		RegistrarDir:     o.RegistrarDir,
		CDIDir:           o.CDIDir,
		BootIDPath:       o.BootIDPath,
		Events:           events,
		Simulated:        o.Simulate != "",
	}
}
