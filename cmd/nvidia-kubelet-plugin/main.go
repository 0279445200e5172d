// Command nvidia-kubelet-plugin is the DRA kubelet plugin of driver
// nvidia.strata.sh. It runs as a DaemonSet on GPU nodes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
)

type options struct {
	nodeName, kubeconfig            string
	pluginDir, registrarDir, cdiDir string
	sysfsRoot, procRoot, devRoot    string
	bootIDPath                      string
	fabricPartitions, hamiLibrary   string
	mpsControl                      string
	metricsAddress                  string
	migMode, nvidiaSMI              string
}

func main() {
	o := options{}
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(fs)
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration if empty")
	fs.StringVar(&o.pluginDir, "plugin-data-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, nvidia.DriverName), "directory for the DRA socket and the checkpoint")
	fs.StringVar(&o.registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet plugin registration directory")
	fs.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "CDI spec directory of the container runtime")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "where the host's sysfs is mounted")
	fs.StringVar(&o.procRoot, "proc-root", "/proc", "where the host's procfs is mounted")
	fs.StringVar(&o.devRoot, "dev-root", "/", "prefix of host device node paths")
	fs.StringVar(&o.bootIDPath, "boot-id-path", plugin.DefaultBootIDPath, "file holding the host's boot id")
	fs.StringVar(&o.fabricPartitions, "fabric-partitions-file", "/run/nvidia-fabricmanager/partitions.json", "NVSwitch fabric manager partition list (fmpm -l output); NVLink partition attributes are published when present")
	fs.StringVar(&o.hamiLibrary, "hami-core-library", nvidia.DefaultHAMiCoreLibrary, "host path of HAMi-core's libvgpu.so for shared GPUs")
	fs.StringVar(&o.mpsControl, "mps-control", "nvidia-cuda-mps-control", "MPS control program; empty disables MPS sharing")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":9401", "address to serve Prometheus metrics on; empty disables")
	fs.StringVar(&o.migMode, "mig-mode", string(nvidia.MIGStatic), "static: publish the MIG instances an operator made, never create or destroy one; dynamic: publish every MIG placement and create instances per claim")
	fs.StringVar(&o.nvidiaSMI, "nvidia-smi", "nvidia-smi", "nvidia-smi program, used to set GPU time slices for TimeSlicing claims; empty refuses intervals other than Default")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.FromContext(ctx).Error(err, "NVIDIA kubelet plugin failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}

func run(ctx context.Context, o options) error {
	if o.nodeName == "" {
		return errors.New("--node-name or $NODE_NAME is required")
	}
	config, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	mode, err := nvidia.ParseMIGMode(o.migMode)
	if err != nil {
		return fmt.Errorf("--mig-mode: %w", err)
	}
	cfg := nvidia.Config{
		NVML: nvml.New(), SysfsRoot: o.sysfsRoot, ProcRoot: o.procRoot, DevRoot: o.devRoot,
		StateDir: o.pluginDir, FabricPartitionsFile: o.fabricPartitions, HAMiCoreLibrary: o.hamiLibrary,
		MIG: mode,
	}
	if o.nvidiaSMI != "" {
		cfg.TimeSlice = nvidia.ExecTimeSlice{Binary: o.nvidiaSMI}
	}
	if o.mpsControl != "" {
		cfg.MPS = nvidia.ExecMPS{Binary: o.mpsControl, StateDir: o.pluginDir}
	}
	backend, err := nvidia.New(cfg)
	if err != nil {
		return err
	}
	defer backend.Close()
	driver, err := plugin.Start(ctx, plugin.Config{
		DriverName:    nvidia.DriverName,
		NodeName:      o.nodeName,
		KubeClient:    client,
		Backend:       backend,
		PluginDataDir: o.pluginDir,
		RegistrarDir:  o.registrarDir,
		CDIDir:        o.cdiDir,
		BootIDPath:    o.bootIDPath,
	})
	if err != nil {
		return err
	}
	if o.metricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", legacyregistry.Handler())
		srv := &http.Server{Addr: o.metricsAddress, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.FromContext(ctx).Error(err, "Metrics server failed")
			}
		}()
		defer srv.Close()
	}
	<-ctx.Done()
	driver.Stop()
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
