package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	schedconfig "github.com/strata-sh/strata/scheduler-plugins/config"
)

// startScheduler runs kube-scheduler in process with the given
// configuration and out-of-tree plugins, the way strata-scheduler's main
// does, minus leader election and the HTTPS endpoint.
// It returns a channel closed once the scheduler has stopped (ctx done).
func startScheduler(ctx context.Context, dir, kubeconfig string, config []byte, registry runtime.Registry) (<-chan struct{}, error) {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "scheduler")
	ctx = klog.NewContext(ctx, logger)
	cfg, err := schedconfig.ForKubeconfig(config, kubeconfig)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "scheduler-config.yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return nil, err
	}
	opts := scheduleroptions.NewOptions()
	opts.ConfigFile = path
	opts.SecureServing.BindPort = 0
	opts.Metrics.AllowListMapping = map[string]string{}

	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	sort.Strings(names)
	var plugins []app.Option
	for _, name := range names {
		plugins = append(plugins, app.WithPlugin(name, registry[name]))
	}
	cc, sched, err := app.Setup(ctx, opts, plugins...)
	if err != nil {
		return nil, fmt.Errorf("set up kube-scheduler: %w", err)
	}
	cc.EventBroadcaster.StartRecordingToSink(ctx.Done())
	cc.InformerFactory.Start(ctx.Done())
	if cc.DynInformerFactory != nil {
		cc.DynInformerFactory.Start(ctx.Done())
	}
	cc.InformerFactory.WaitForCacheSync(ctx.Done())
	if cc.DynInformerFactory != nil {
		cc.DynInformerFactory.WaitForCacheSync(ctx.Done())
	}
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		return nil, fmt.Errorf("kube-scheduler handlers: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sched.Run(ctx)
		cc.EventBroadcaster.Shutdown()
	}()
	logger.V(1).Info("Scheduler started", "plugins", names)
	return done, nil
}
