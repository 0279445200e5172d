package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
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
		BootIDPath:     DefaultBootIDPath,
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
func (o Options) Config(driver string, backend Backend, client kubernetes.Interface, events record.EventBroadcaster) Config {
	return Config{
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

// Stopper is a running plugin.
type Stopper interface{ Stop() }

// Serve is a plugin binary's main loop: it connects to the API server,
// starts the plugin, serves metrics, and stops the plugin when ctx ends.
func Serve(ctx context.Context, o Options, start func(ctx context.Context, client kubernetes.Interface) (Stopper, error)) error {
	config, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	p, err := start(ctx, client)
	if err != nil {
		return err
	}
	defer p.Stop()
	if o.MetricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", legacyregistry.Handler())
		srv := &http.Server{Addr: o.MetricsAddress, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		// During a rolling update the old pod holds the port (plugins on
		// the host network share it) until it stops: keep trying.
		go func() {
			for {
				err := srv.ListenAndServe()
				if errors.Is(err, http.ErrServerClosed) || ctx.Err() != nil {
					return
				}
				klog.FromContext(ctx).Error(err, "Metrics server failed, retrying", "address", o.MetricsAddress)
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Second):
				}
			}
		}()
		defer srv.Close()
	}
	<-ctx.Done()
	return nil
}

// probeMain is the probe command.
func probeMain(args []string) int {
	fs := flag.NewFlagSet(ProbeCommand, flag.ContinueOnError)
	dir := fs.String("plugin-data-dir", "", "the plugin's data folder")
	podUID := fs.String("pod-uid", os.Getenv("POD_UID"), "UID of the plugin's pod (default $POD_UID)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "probe: --plugin-data-dir is required")
		return 2
	}
	if err := Probe(*dir, *podUID, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	return 0
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration: %w", err)
		}
		return c, nil
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// Main is a plugin binary's main function: it parses the flags that
// addFlags binds (and klog's), runs until SIGINT or SIGTERM, and exits 1
// with the error run returns.
//
// Run as "<binary> probe --plugin-data-dir=<dir>" it is the DaemonSet's
// liveness and readiness probe instead: it judges the plugin of this pod
// ($POD_UID) from the file its watchdog keeps, and exits 0 or 1.
func Main(what string, addFlags func(*flag.FlagSet), run func(context.Context) error) {
	if len(os.Args) > 1 && os.Args[1] == ProbeCommand {
		os.Exit(probeMain(os.Args[2:]))
	}
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(fs)
	addFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		klog.FromContext(ctx).Error(err, what+" failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}
