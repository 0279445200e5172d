package devicecounttest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

// PluginConfig loads a KubeSchedulerConfiguration document with
// kube-scheduler's own loader and returns its first profile's plugin
// args.
func PluginConfig(tb testing.TB, doc string) ([]config.PluginConfig, error) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), path)
	if err != nil {
		return nil, err
	}
	return cfg.Profiles[0].PluginConfig, nil
}

// Profile is what Framework builds a framework from.
type Profile struct {
	// Registry holds the plugins besides PrioritySort and DefaultBinder,
	// which complete the profile.
	Registry runtime.Registry
	// PluginConfig holds the plugins' args.
	PluginConfig []config.PluginConfig
	// PreScore and Score are the plugins enabled at those extension
	// points.
	PreScore, Score []config.Plugin
	// DRA and Snapshot are the scheduler's DRA objects and nodes; either
	// may be nil.
	DRA      fwk.SharedDRAManager
	Snapshot fwk.SharedLister
}

// Framework builds a scheduling framework for a profile.
func Framework(ctx context.Context, tb testing.TB, p Profile) (framework.Framework, error) {
	tb.Helper()
	metrics.Register() // the framework records into the scheduler's metrics
	r := runtime.Registry{
		queuesort.Name:     queuesort.New,
		defaultbinder.Name: defaultbinder.New,
	}
	if err := r.Merge(p.Registry); err != nil {
		tb.Fatal(err)
	}
	profile := &config.KubeSchedulerProfile{
		SchedulerName: "test",
		Plugins: &config.Plugins{
			QueueSort: config.PluginSet{Enabled: []config.Plugin{{Name: queuesort.Name}}},
			Bind:      config.PluginSet{Enabled: []config.Plugin{{Name: defaultbinder.Name}}},
			PreScore:  config.PluginSet{Enabled: p.PreScore},
			Score:     config.PluginSet{Enabled: p.Score},
		},
		PluginConfig: p.PluginConfig,
	}
	ctx, cancel := context.WithCancel(ctx)
	f, err := runtime.NewFramework(ctx, r, profile, runtime.WithSharedDRAManager(p.DRA), runtime.WithSnapshotSharedLister(p.Snapshot))
	if err != nil {
		cancel()
		return nil, err
	}
	tb.Cleanup(func() {
		cancel()
		runtime.WaitForShutdown(f)
	})
	return f, nil
}

// Scores runs a framework's PreScore and Score plugins for a pod and
// returns each node's total (weighted) score.
func Scores(ctx context.Context, tb testing.TB, f framework.Framework, pod *corev1.Pod, nodes []fwk.NodeInfo) map[string]int64 {
	tb.Helper()
	state := framework.NewCycleState()
	if st := f.RunPreScorePlugins(ctx, state, pod, nodes); !st.IsSuccess() {
		tb.Fatalf("PreScore: %v", st.AsError())
	}
	scores, st := f.RunScorePlugins(ctx, state, pod, nodes)
	if !st.IsSuccess() {
		tb.Fatalf("Score: %v", st.AsError())
	}
	out := map[string]int64{}
	for _, s := range scores {
		out[s.Name] = s.TotalScore
	}
	return out
}
