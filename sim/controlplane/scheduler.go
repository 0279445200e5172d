package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"sigs.k8s.io/yaml"

	schedconfig "github.com/strata-sh/strata/scheduler-plugins/config"
)

// replicaKey carries a scheduler replica's name and incarnation in the
// context its plugins are built with.
type replicaKey struct{}

type replicaValue struct {
	name        string
	incarnation int
}

// SchedulerReplica returns the name of the scheduler replica
// ("scheduler-0", "scheduler-1", ...) whose plugins are being built with
// ctx and which incarnation of it this is (1 for its first start), or ""
// for a scheduler without replicas. Tests use it in a plugin factory to
// tell the instances of a plugin apart.
func SchedulerReplica(ctx context.Context) (name string, incarnation int) {
	v, _ := ctx.Value(replicaKey{}).(replicaValue)
	return v.name, v.incarnation
}

// schedulerRun is a running scheduler.
type schedulerRun struct {
	// done is closed once the scheduler has stopped: its context ended
	// or, with leader election, it lost its lease.
	done <-chan struct{}
	// identity is its leader election identity; empty without.
	identity string
}

// startScheduler runs kube-scheduler in process with the given
// configuration and out-of-tree plugins, the way strata-scheduler's main
// does, minus the HTTPS endpoint. Without le there is no leader election
// either; with it, the scheduler is a candidate for the Lease the
// configuration names (kube-system/kube-scheduler by default), and
// leading reports when it starts and stops leading.
func startScheduler(ctx context.Context, dir, kubeconfig string, config []byte, registry runtime.Registry, le *LeaderElection, leading func(bool)) (*schedulerRun, error) {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "scheduler")
	ctx = klog.NewContext(ctx, logger)
	cfg, err := schedconfig.ForKubeconfig(config, kubeconfig)
	if err != nil {
		return nil, err
	}
	if le != nil {
		if cfg, err = withLeaderElection(cfg, le); err != nil {
			return nil, err
		}
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
	run := &schedulerRun{done: done}
	if cc.LeaderElection == nil {
		go func() {
			defer close(done)
			sched.Run(ctx)
			cc.EventBroadcaster.Shutdown()
		}()
		logger.V(1).Info("Scheduler started", "plugins", names)
		return run, nil
	}
	// As kube-scheduler's own Run: the standby keeps its caches warm and
	// schedules only while it leads; a scheduler that stops leading
	// exits (here: its context ends).
	ctx, stop := context.WithCancel(ctx)
	lec := *cc.LeaderElection
	lec.Callbacks = leaderelection.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			logger.V(1).Info("Leading", "identity", run.identity)
			leading(true)
			sched.Run(ctx)
		},
		OnStoppedLeading: func() {
			leading(false)
			stop()
		},
	}
	elector, err := leaderelection.NewLeaderElector(lec)
	if err != nil {
		stop()
		return nil, fmt.Errorf("kube-scheduler leader election: %w", err)
	}
	run.identity = lec.Lock.Identity()
	go func() {
		defer close(done)
		defer stop()
		elector.Run(ctx)
		cc.EventBroadcaster.Shutdown()
	}()
	logger.V(1).Info("Scheduler started, a candidate for leader", "identity", run.identity, "plugins", names)
	return run, nil
}

// withLeaderElection turns leader election on in a scheduler
// configuration with le's durations, keeping the Lease it names.
func withLeaderElection(config []byte, le *LeaderElection) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		return nil, fmt.Errorf("parse scheduler configuration: %w", err)
	}
	section, _ := cfg["leaderElection"].(map[string]any)
	if section == nil {
		section = map[string]any{}
	}
	lease, renew, retry := le.durations()
	section["leaderElect"] = true
	section["leaseDuration"] = lease.String()
	section["renewDeadline"] = renew.String()
	section["retryPeriod"] = retry.String()
	cfg["leaderElection"] = section
	return yaml.Marshal(cfg)
}

// LeaderElection runs strata-scheduler's replicas active/standby with
// kube-scheduler's own leader election on a Lease in the API server, as
// the Helm chart deploys them. Zero durations are short ones for tests
// (4 s lease, 3 s renew deadline, 500 ms retry); kube-scheduler's
// defaults are 15 s, 10 s and 2 s.
type LeaderElection struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// RestartAfter is how long a replica that stopped (killed, or lost
	// its lease) stays down before it starts again, as the kubelet
	// restarts a crashed container; 1 s if zero.
	RestartAfter time.Duration
}

func (le *LeaderElection) durations() (lease, renew, retry time.Duration) {
	lease, renew, retry = le.LeaseDuration, le.RenewDeadline, le.RetryPeriod
	if lease == 0 {
		lease = 4 * time.Second
	}
	if renew == 0 {
		renew = 3 * time.Second
	}
	if retry == 0 {
		retry = 500 * time.Millisecond
	}
	return lease, renew, retry
}
