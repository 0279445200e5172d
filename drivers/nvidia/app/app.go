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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/simulated"
)

// Options are the plugin's settings, as its flags give them.
type Options struct {
	pluginmain.Options

	SysfsRoot            string
	ProcRoot             string
	DevRoot              string
	FabricPartitionsFile string
	HAMiCoreLibrary      string
	HAMiCoreCheck        string
	// NVMLLibrary lists candidate paths of libnvidia-ml.so.1, separated
	// by colons; the first that exists is loaded. Empty leaves it to the
	// dynamic loader's search path.
	NVMLLibrary string
	// MPSControl and NvidiaSMI name the host programs; empty disables MPS
	// sharing and time-slice intervals other than Default.
	MPSControl string
	NvidiaSMI  string
	// MPSDaemon says where MPS control daemons run: "process" (children of
	// the plugin, for a plugin on the host) or "pod" (a pod per GPU, made
	// through the API server, for a plugin in a container: the daemons
	// outlive its restarts). The MPSDaemon* settings shape the pods.
	MPSDaemon                 string
	MPSDaemonNamespace        string
	MPSDaemonImage            string
	MPSDaemonImagePullSecrets string
	MPSDaemonDriverRoot       string
	MPSDaemonPriorityClass    string
	// mpsCommand, if set, is the control program with leading arguments
	// (a simulated machine's stand-in); it overrides MPSControl.
	mpsCommand []string

	MIGMode        string
	HealthInterval time.Duration
	XIDHoldDown    time.Duration
}

// NewOptions returns the defaults of a plugin on a real node.
func NewOptions() Options {
	return Options{
		Options:              pluginmain.NewOptions(nvidia.DriverName, ":9401"),
		SysfsRoot:            "/sys",
		ProcRoot:             "/proc",
		DevRoot:              "/",
		FabricPartitionsFile: "/run/nvidia-fabricmanager/partitions.json",
		HAMiCoreLibrary:      nvidia.DefaultHAMiCoreLibrary,
		MPSControl:           "nvidia-cuda-mps-control",
		MPSDaemon:            MPSDaemonProcess,
		MPSDaemonNamespace:   os.Getenv("POD_NAMESPACE"),
		NvidiaSMI:            "nvidia-smi",
		MIGMode:              string(nvidia.MIGStatic),
		HealthInterval:       nvidia.DefaultHealthInterval,
		XIDHoldDown:          nvidia.DefaultXIDHoldDown,
	}
}

// AddFlags binds the options to flags, with the current values as
// defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.StringVar(&o.SysfsRoot, "sysfs-root", o.SysfsRoot, "where the host's sysfs is mounted")
	fs.StringVar(&o.ProcRoot, "proc-root", o.ProcRoot, "where the host's procfs is mounted")
	fs.StringVar(&o.DevRoot, "dev-root", o.DevRoot, "prefix of host device node paths")
	fs.StringVar(&o.FabricPartitionsFile, "fabric-partitions-file", o.FabricPartitionsFile, "NVSwitch fabric manager partition list (fmpm -l output); NVLink partition attributes are published when present")
	fs.StringVar(&o.HAMiCoreLibrary, "hami-core-library", o.HAMiCoreLibrary, "host path of HAMi-core's libvgpu.so for shared GPUs")
	fs.StringVar(&o.HAMiCoreCheck, "hami-core-check", o.HAMiCoreCheck, "where the plugin sees --hami-core-library, to check it is a shared library before a container is told to preload it; empty skips the check")
	fs.StringVar(&o.NVMLLibrary, "nvml-library", o.NVMLLibrary, "candidate paths of libnvidia-ml.so.1, colon-separated, the first that exists is loaded (e.g. under the host's driver root); empty uses the dynamic loader's search path")
	fs.StringVar(&o.MPSControl, "mps-control", o.MPSControl, "MPS control program; empty disables MPS sharing")
	fs.StringVar(&o.MPSDaemon, "mps-daemon", o.MPSDaemon, "where MPS control daemons run: process (children of the plugin, for a plugin run on the host) or pod (one pod per GPU on this node, made through the API server, so that a restart or update of the plugin's pod leaves them and their clients running)")
	fs.StringVar(&o.MPSDaemonNamespace, "mps-daemon-namespace", o.MPSDaemonNamespace, "namespace of the MPS daemon pods (default $POD_NAMESPACE)")
	fs.StringVar(&o.MPSDaemonImage, "mps-daemon-image", o.MPSDaemonImage, "image of the MPS daemon pods: the plugin's own (they run its mps-daemon command)")
	fs.StringVar(&o.MPSDaemonImagePullSecrets, "mps-daemon-image-pull-secrets", o.MPSDaemonImagePullSecrets, "comma-separated image pull secrets of the MPS daemon pods")
	fs.StringVar(&o.MPSDaemonDriverRoot, "mps-daemon-driver-root", o.MPSDaemonDriverRoot, "host path of the NVIDIA driver root, mounted read-only at "+nvidia.MPSDriverRootMount+" in the MPS daemon pods as in the plugin's (where --mps-control and --nvml-library point)")
	fs.StringVar(&o.MPSDaemonPriorityClass, "mps-daemon-priority-class", o.MPSDaemonPriorityClass, "priority class of the MPS daemon pods")
	fs.StringVar(&o.NvidiaSMI, "nvidia-smi", o.NvidiaSMI, "nvidia-smi program, used to set GPU time slices for TimeSlicing claims; empty refuses intervals other than Default")
	fs.StringVar(&o.MIGMode, "mig-mode", o.MIGMode, "static: publish the MIG instances an operator made, never create or destroy one; dynamic: publish every MIG placement and create instances per claim")
	fs.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "how often every GPU is probed for health and MIG layout changes (XID and ECC events arrive at once)")
	fs.DurationVar(&o.XIDHoldDown, "xid-hold-down", o.XIDHoldDown, "how long a critical XID keeps a GPU tainted after its last occurrence")
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	errs := []error{o.Options.Validate()}
	if _, err := nvidia.ParseMIGMode(o.MIGMode); err != nil {
		errs = append(errs, fmt.Errorf("--mig-mode: %w", err))
	}
	if o.HealthInterval <= 0 {
		errs = append(errs, fmt.Errorf("--health-interval must be positive, not %s", o.HealthInterval))
	}
	switch o.MPSDaemon {
	case MPSDaemonProcess:
	case MPSDaemonPod:
		if o.MPSDaemonNamespace == "" {
			errs = append(errs, errors.New("--mps-daemon=pod needs --mps-daemon-namespace or $POD_NAMESPACE"))
		}
		if o.MPSDaemonImage == "" {
			errs = append(errs, errors.New("--mps-daemon=pod needs --mps-daemon-image"))
		}
	default:
		errs = append(errs, fmt.Errorf("--mps-daemon must be %s or %s, not %q", MPSDaemonProcess, MPSDaemonPod, o.MPSDaemon))
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
		HAMiCoreCheck:        o.HAMiCoreCheck,
		MPS:                  host.MPS,
		MIG:                  mode,
		TimeSlice:            host.TimeSlice,
		HealthInterval:       o.HealthInterval,
		XIDHoldDown:          o.XIDHoldDown,
	}
	libraryDir := ""
	if cfg.NVML == nil {
		lib, err := findLibrary(o.NVMLLibrary)
		if err != nil {
			return nil, fmt.Errorf("--nvml-library: %w", err)
		}
		if lib != "" {
			libraryDir = filepath.Dir(lib)
		}
		if lib == "" {
			cfg.NVML = nvml.New()
		} else {
			cfg.NVML = nvml.New(nvml.WithLibraryPath(lib))
		}
	}
	if cfg.MPS == nil {
		mps, err := o.mpsControl(ctx, client, libraryDir)
		if err != nil {
			return nil, err
		}
		cfg.MPS = mps
	}
	if cfg.TimeSlice == nil && o.NvidiaSMI != "" {
		cfg.TimeSlice = nvidia.ExecTimeSlice{Binary: o.NvidiaSMI, LibraryDir: libraryDir}
	}
	backend, err := nvidia.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("NVIDIA backend: %w", err)
	}
	for _, err := range backend.Unusable() {
		klog.FromContext(ctx).Error(err, "GPU left out: it cannot be read; the other GPUs are served")
	}
	driver, err := plugin.Start(ctx, o.Config(nvidia.DriverName, backend, client, host.Events))
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
	host := Host{}
	if o.Simulate != "" {
		var err error
		if o, host, err = simulate(o); err != nil {
			return err
		}
	}
	return pluginmain.Serve(ctx, o.Options, func(ctx context.Context, client kubernetes.Interface) (pluginmain.Stopper, error) {
		return Start(ctx, o, client, host)
	})
}

// simulate points the options at a simulated machine of the --simulate
// preset, in the plugin's data folder, and returns its NVML, MPS and
// time-slice fakes; it refuses a node with real NVIDIA GPUs.
func simulate(o Options) (Options, Host, error) {
	m, err := simulated.ForPlugin(o.PluginDataDir, o.Simulate, o.NodeName, o.BootIDPath, simulated.NVIDIA)
	if err != nil {
		return o, Host{}, err
	}
	o.SysfsRoot, o.ProcRoot, o.DevRoot = m.SysfsRoot(), m.ProcRoot(), m.DevRoot()
	o.FabricPartitionsFile = m.Path(hardware.FabricPartitionsFile)
	o.HAMiCoreLibrary = m.Path(simulated.HAMiCoreLibrary)
	// The simulated machine's library is a stand-in, not a shared object.
	o.HAMiCoreCheck = ""
	// MPS daemons are processes of the stand-in program, which is this
	// binary: they live and die as real ones do.
	self, err := os.Executable()
	if err != nil {
		return o, Host{}, err
	}
	o.mpsCommand = []string{self, SimulatedMPSControlCommand}
	return o, Host{NVML: m.NVML, TimeSlice: m.TimeSlices}, nil
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

// Where MPS daemons run (--mps-daemon).
const (
	MPSDaemonProcess = "process"
	MPSDaemonPod     = "pod"
)

// mpsControl is the MPS control the options give; nil disables MPS.
func (o Options) mpsControl(ctx context.Context, client kubernetes.Interface, libraryDir string) (nvidia.MPSControl, error) {
	command := o.mpsCommand
	if command == nil && o.MPSControl != "" {
		command = []string{o.MPSControl}
	}
	if command == nil {
		return nil, nil
	}
	exec := nvidia.ExecMPS{Command: command, StateDir: o.PluginDataDir, LibraryDir: libraryDir}
	if o.MPSDaemon != MPSDaemonPod {
		return exec, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &nvidia.PodMPS{
		Exec:              exec,
		Client:            client,
		Namespace:         o.MPSDaemonNamespace,
		NodeName:          o.NodeName,
		NodeUID:           o.NodeUID,
		Image:             o.MPSDaemonImage,
		DaemonCommand:     []string{self, MPSDaemonCommand},
		DriverRoot:        o.MPSDaemonDriverRoot,
		PriorityClassName: o.MPSDaemonPriorityClass,
	}
	for _, s := range strings.Split(o.MPSDaemonImagePullSecrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			p.ImagePullSecrets = append(p.ImagePullSecrets, s)
		}
	}
	if p.NodeUID == "" {
		// The daemon pods are owned by the node, so that they go with it.
		if node, err := client.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{}); err == nil {
			p.NodeUID = node.UID
		} else {
			klog.FromContext(ctx).Error(err, "Cannot read the node; MPS daemon pods get no owner")
		}
	}
	return p, nil
}
