// Package app is the composition root of the NVIDIA kubelet plugin. The
// nvidia-kubelet-plugin binary and strata-sim's simulated nodes both start
// the plugin through Start, so what is deployed is what is tested; they
// differ only in the Host they hand it (the real NVML library and tools,
// or mocks of them) and in where the node's directories are.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
)

// Options are the plugin's settings, as its flags give them.
type Options struct {
	// NodeName is required; NodeUID is optional.
	NodeName string
	NodeUID  types.UID
	// PodUID is the UID of the plugin's pod; set, the DaemonSet may be
	// updated with maxSurge, the new pod starting beside the old one.
	// Empty means one plugin pod per node at a time.
	PodUID types.UID
	// Kubeconfig is used by Run; empty means the in-cluster configuration.
	Kubeconfig string

	PluginDataDir string
	RegistrarDir  string
	CDIDir        string

	SysfsRoot            string
	ProcRoot             string
	DevRoot              string
	BootIDPath           string
	FabricPartitionsFile string
	HAMiCoreLibrary      string
	// NVMLLibrary lists candidate paths of libnvidia-ml.so.1, separated
	// by colons; the first that exists is loaded. Empty leaves it to the
	// dynamic loader's search path.
	NVMLLibrary string
	// MPSControl and NvidiaSMI name the host programs; empty disables MPS
	// sharing and time-slice intervals other than Default.
	MPSControl string
	NvidiaSMI  string

	MIGMode        string
	HealthInterval time.Duration
	XIDHoldDown    time.Duration
	// MetricsAddress is served by Run; empty disables.
	MetricsAddress string
}

// NewOptions returns the defaults of a plugin on a real node.
func NewOptions() Options {
	return Options{
		NodeName:             os.Getenv("NODE_NAME"),
		PodUID:               types.UID(os.Getenv("POD_UID")),
		PluginDataDir:        filepath.Join(kubeletplugin.KubeletPluginsDir, nvidia.DriverName),
		RegistrarDir:         kubeletplugin.KubeletRegistryDir,
		CDIDir:               "/var/run/cdi",
		SysfsRoot:            "/sys",
		ProcRoot:             "/proc",
		DevRoot:              "/",
		BootIDPath:           plugin.DefaultBootIDPath,
		FabricPartitionsFile: "/run/nvidia-fabricmanager/partitions.json",
		HAMiCoreLibrary:      nvidia.DefaultHAMiCoreLibrary,
		MPSControl:           "nvidia-cuda-mps-control",
		NvidiaSMI:            "nvidia-smi",
		MIGMode:              string(nvidia.MIGStatic),
		HealthInterval:       nvidia.DefaultHealthInterval,
		XIDHoldDown:          nvidia.DefaultXIDHoldDown,
		MetricsAddress:       ":9401",
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
	fs.StringVar(&o.SysfsRoot, "sysfs-root", o.SysfsRoot, "where the host's sysfs is mounted")
	fs.StringVar(&o.ProcRoot, "proc-root", o.ProcRoot, "where the host's procfs is mounted")
	fs.StringVar(&o.DevRoot, "dev-root", o.DevRoot, "prefix of host device node paths")
	fs.StringVar(&o.BootIDPath, "boot-id-path", o.BootIDPath, "file holding the host's boot id")
	fs.StringVar(&o.FabricPartitionsFile, "fabric-partitions-file", o.FabricPartitionsFile, "NVSwitch fabric manager partition list (fmpm -l output); NVLink partition attributes are published when present")
	fs.StringVar(&o.HAMiCoreLibrary, "hami-core-library", o.HAMiCoreLibrary, "host path of HAMi-core's libvgpu.so for shared GPUs")
	fs.StringVar(&o.NVMLLibrary, "nvml-library", o.NVMLLibrary, "candidate paths of libnvidia-ml.so.1, colon-separated, the first that exists is loaded (e.g. under the host's driver root); empty uses the dynamic loader's search path")
	fs.StringVar(&o.MPSControl, "mps-control", o.MPSControl, "MPS control program; empty disables MPS sharing")
	fs.StringVar(&o.NvidiaSMI, "nvidia-smi", o.NvidiaSMI, "nvidia-smi program, used to set GPU time slices for TimeSlicing claims; empty refuses intervals other than Default")
	fs.StringVar(&o.MIGMode, "mig-mode", o.MIGMode, "static: publish the MIG instances an operator made, never create or destroy one; dynamic: publish every MIG placement and create instances per claim")
	fs.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "how often every GPU is probed for health and MIG layout changes (XID and ECC events arrive at once)")
	fs.DurationVar(&o.XIDHoldDown, "xid-hold-down", o.XIDHoldDown, "how long a critical XID keeps a GPU tainted after its last occurrence")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "address to serve Prometheus metrics on; empty disables")
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
	if _, err := nvidia.ParseMIGMode(o.MIGMode); err != nil {
		errs = append(errs, fmt.Errorf("--mig-mode: %w", err))
	}
	if o.HealthInterval <= 0 {
		errs = append(errs, fmt.Errorf("--health-interval must be positive, not %s", o.HealthInterval))
	}
	if o.XIDHoldDown < 0 {
		errs = append(errs, fmt.Errorf("--xid-hold-down must not be negative, not %s", o.XIDHoldDown))
	}
	return errors.Join(errs...)
}

// Host is what the plugin drives on its machine. Nil fields are the real
// host: the NVML library, and the MPS and nvidia-smi programs that
// Options name.
type Host struct {
	NVML      nvml.Interface
	MPS       nvidia.MPSControl
	TimeSlice nvidia.TimeSliceControl
	// Events, if set, sends the plugin's events (a process running many
	// plugins shares one broadcaster).
	Events record.EventBroadcaster
}

// Plugin is a running NVIDIA kubelet plugin.
type Plugin struct {
	driver  *plugin.Driver
	backend *nvidia.Backend
}

// Stop stops serving and publishing and releases NVML. Published slices
// and prepared claims stay, as when a real plugin's pod is replaced.
func (p *Plugin) Stop() {
	p.driver.Stop()
	p.backend.Close()
}

// Start discovers the node's GPUs, recovers the checkpoint and starts
// serving DRA and publishing ResourceSlices.
func Start(ctx context.Context, o Options, client kubernetes.Interface, host Host) (*Plugin, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	mode, _ := nvidia.ParseMIGMode(o.MIGMode)
	cfg := nvidia.Config{
		NVML:                 host.NVML,
		SysfsRoot:            o.SysfsRoot,
		ProcRoot:             o.ProcRoot,
		DevRoot:              o.DevRoot,
		StateDir:             o.PluginDataDir,
		FabricPartitionsFile: o.FabricPartitionsFile,
		HAMiCoreLibrary:      o.HAMiCoreLibrary,
		MPS:                  host.MPS,
		MIG:                  mode,
		TimeSlice:            host.TimeSlice,
		HealthInterval:       o.HealthInterval,
		XIDHoldDown:          o.XIDHoldDown,
	}
	if cfg.NVML == nil {
		lib, err := findLibrary(o.NVMLLibrary)
		if err != nil {
			return nil, fmt.Errorf("--nvml-library: %w", err)
		}
		if lib == "" {
			cfg.NVML = nvml.New()
		} else {
			cfg.NVML = nvml.New(nvml.WithLibraryPath(lib))
		}
	}
	if cfg.MPS == nil && o.MPSControl != "" {
		cfg.MPS = nvidia.ExecMPS{Binary: o.MPSControl, StateDir: o.PluginDataDir}
	}
	if cfg.TimeSlice == nil && o.NvidiaSMI != "" {
		cfg.TimeSlice = nvidia.ExecTimeSlice{Binary: o.NvidiaSMI}
	}
	backend, err := nvidia.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("NVIDIA backend: %w", err)
	}
	driver, err := plugin.Start(ctx, plugin.Config{
		DriverName:       nvidia.DriverName,
		NodeName:         o.NodeName,
		NodeUID:          o.NodeUID,
		KubeClient:       client,
		RollingUpdateUID: o.PodUID,
		Backend:          backend,
		PluginDataDir:    o.PluginDataDir,
		RegistrarDir:     o.RegistrarDir,
		CDIDir:           o.CDIDir,
		BootIDPath:       o.BootIDPath,
		Events:           host.Events,
	})
	if err != nil {
		backend.Close()
		return nil, err
	}
	return &Plugin{driver: driver, backend: backend}, nil
}

// Run is the nvidia-kubelet-plugin binary: the plugin on the real host,
// with metrics, until ctx ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	config, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	p, err := Start(ctx, o, client, Host{})
	if err != nil {
		return err
	}
	defer p.Stop()
	if o.MetricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", legacyregistry.Handler())
		srv := &http.Server{Addr: o.MetricsAddress, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.FromContext(ctx).Error(err, "Metrics server failed")
			}
		}()
		defer srv.Close()
	}
	<-ctx.Done()
	return nil
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

// findLibrary returns the first existing path of a colon-separated list,
// "" for an empty list.
func findLibrary(candidates string) (string, error) {
	if candidates == "" {
		return "", nil
	}
	for _, p := range strings.Split(candidates, ":") {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %s exists", candidates)
}
