package pluginmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/plugin"
)

// ProbeCommand is the first argument that makes a plugin binary probe
// the running plugin (plugin.Probe) instead of starting one.
const ProbeCommand = "probe"

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
	if err := plugin.Probe(*dir, *podUID, time.Now()); err != nil {
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
