// Package sim is strata-sim: a Kubernetes cluster in one process, with a
// real control plane (package controlplane), simulated nodes running
// Strata's kubelet plugins on fake hardware (package node) and a report of
// where everything landed (package report).
package sim

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/controller"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/strata-sh/strata/deployments/chart"
	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/cluster"
	"github.com/strata-sh/strata/sim/controlplane"
	"github.com/strata-sh/strata/sim/node"
	"github.com/strata-sh/strata/sim/realnode"
	"github.com/strata-sh/strata/sim/report"
)

// Config configures a simulated cluster.
type Config struct {
	// Cluster lists the nodes.
	Cluster *cluster.Cluster
	// Dir is the work directory; empty means a new temporary one that
	// Stop removes. Keep it short: node plugin sockets live below it.
	Dir string
	// ControlPlane configures the API server and scheduler.
	ControlPlane controlplane.Options
	// NodeWorkers is the number of parallel pod syncs across all nodes.
	NodeWorkers int
	// NodeStartParallelism is how many nodes start at once (default
	// DefaultNodeStartParallelism).
	NodeStartParallelism int
	// ChartValues are Helm values over the chart's defaults for the
	// installation of Strata the cluster starts with.
	ChartValues map[string]any
	// RealNodes is needed when the cluster has real node groups.
	RealNodes *RealNodes
}

// GCPercent is the garbage collector's target for a simulated cluster
// unless GOGC is set: half of Go's default. Nearly all that a large
// simulated cluster holds stays live (informer caches, every node's
// plugin state), and the default lets the heap grow to twice that before
// collecting; on 1,000 DGX nodes 50 lowers peak memory by about a
// quarter for about a tenth more time (docs/benchmarks.md).
const GCPercent = 50

// TuneGC sets the garbage collector for a simulated cluster (GCPercent)
// unless the GOGC environment variable says otherwise. It changes the
// whole process: strata-sim's main calls it.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
}

// nodesDir is the work directory's folder of node folders (short: plugin
// sockets live below it).
const nodesDir = "n"

// DefaultNodeStartParallelism is how many simulated nodes start at once.
// A node's start is mostly waiting: its plugin's ResourceSlice controller
// checks its informer's sync once a second, so one node takes about a
// second however fast the machine is, and nodes started one by one boot
// a thousand-node cluster in a quarter of an hour. 256 at a time boot a
// thousand DGX nodes in about 20 s on two cores (64 at a time: 28 s).
const DefaultNodeStartParallelism = 256

// addNodes creates the nodes and starts their plugins, parallel nodes at
// a time, stopping at the first failure.
func (s *Sim) addNodes(ctx context.Context, specs []node.Spec, parallel int) error {
	if parallel <= 0 {
		parallel = DefaultNodeStartParallelism
	}
	// Not errgroup.WithContext: the nodes' plugins live on ctx, which must
	// not end when the group is done.
	var g errgroup.Group
	g.SetLimit(parallel)
	var failed atomic.Bool
	for _, spec := range specs {
		g.Go(func() error {
			if failed.Load() {
				return nil
			}
			if _, err := s.Nodes.AddNode(ctx, spec); err != nil {
				failed.Store(true)
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

// Sim is a running simulated cluster.
type Sim struct {
	ControlPlane   *controlplane.ControlPlane
	Nodes          *node.Manager
	Cluster        *cluster.Cluster
	applier        *apply.Applier
	dyn            dynamic.Interface
	install        *installation
	stopController func()
	dir            string
	ownDir         bool
	realNodes      []*realnode.Node
}

// Start boots the control plane, installs Strata's cluster objects
// (DeviceClasses) and creates the nodes with their plugins.
func Start(ctx context.Context, cfg Config) (_ *Sim, finalErr error) {
	logger := klog.FromContext(ctx)
	s := &Sim{Cluster: cfg.Cluster, dir: cfg.Dir}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "strata-")
		if err != nil {
			return nil, err
		}
		s.dir, s.ownDir = dir, true
	}
	defer func() {
		if finalErr != nil {
			s.Stop()
		}
	}()
	cpOpts := cfg.ControlPlane
	if cpOpts.Dir == "" {
		cpOpts.Dir = filepath.Join(s.dir, "cp")
	}
	start := time.Now()
	var err error
	values := cfg.ChartValues
	// Nodes that run the RDMA or Ascend plugin need its identity, RBAC and
	// DeviceClasses, which the chart installs when plugins.<vendor> is
	// enabled (off by default); the user's values still decide.
	for _, vendor := range cfg.Cluster.ChartPlugins() {
		values = loader.MergeMaps(map[string]any{"plugins": map[string]any{vendor: map[string]any{"enabled": true}}}, values)
	}
	if s.install, err = newInstallation(chart.DefaultRelease, values, cpOpts.KubeScheduler); err != nil {
		return nil, fmt.Errorf("install Strata: %w", err)
	}
	if cpOpts.SchedulerConfig == nil {
		cpOpts.SchedulerConfig = s.install.schedulerConfig
	}
	cpOpts.SchedulerIdentity = s.install.scheduler
	// What the chart installs exists before the scheduler starts, as a
	// Helm install orders it.
	cpOpts.Bootstrap = func(ctx context.Context, config *restclient.Config) error {
		var err error
		if s.applier, err = apply.New(config); err != nil {
			return err
		}
		if err := s.applier.Apply(ctx, s.install.objects); err != nil {
			return fmt.Errorf("install Strata: %w", err)
		}
		return nil
	}
	cp, err := controlplane.Start(ctx, cpOpts)
	if err != nil {
		return nil, err
	}
	s.ControlPlane = cp
	if s.dyn, err = dynamic.NewForConfig(cp.Config); err != nil {
		return nil, err
	}
	if err := s.startController(ctx); err != nil {
		return nil, err
	}
	workers := cfg.NodeWorkers
	if workers == 0 {
		workers = 8
	}
	if s.Nodes, err = node.NewManager(ctx, cp.Client, filepath.Join(s.dir, nodesDir), workers); err != nil {
		return nil, err
	}
	s.Nodes.PluginClient = s.pluginClient
	specs, err := cfg.Cluster.NodeSpecs()
	if err != nil {
		return nil, err
	}
	if err := s.addNodes(ctx, specs, cfg.NodeStartParallelism); err != nil {
		return nil, err
	}
	if err := s.waitPublished(ctx, specs); err != nil {
		return nil, err
	}
	if err := s.startRealNodes(ctx, cfg); err != nil {
		return nil, err
	}
	logger.V(1).Info("Simulated cluster ready", "nodes", len(specs), "duration", time.Since(start))
	return s, nil
}

// publishTimeout bounds the wait for the nodes' devices after their
// plugins started.
const publishTimeout = 5 * time.Minute

// waitPublished returns once every plugin of every node has published its
// whole pool (all slices of the pool's newest generation). A plugin
// publishes in the background, and a cluster whose devices are still
// arriving would have workloads placed on part of it.
func (s *Sim) waitPublished(ctx context.Context, specs []node.Spec) error {
	type pool struct{ driver, node string }
	want := map[pool]bool{}
	for _, spec := range specs {
		for _, p := range spec.Plugins {
			want[pool{p.Driver, spec.Name}] = true
		}
	}
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, publishTimeout, true, func(ctx context.Context) (bool, error) {
		slices, err := s.ControlPlane.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		type generation struct {
			node         pool
			gen          int64
			count, total int64
		}
		pools := map[[2]string]*generation{} // by driver and pool name
		for _, sl := range slices.Items {
			if sl.Spec.NodeName == nil {
				continue
			}
			key := [2]string{sl.Spec.Driver, sl.Spec.Pool.Name}
			g := pools[key]
			switch {
			case g == nil || sl.Spec.Pool.Generation > g.gen:
				pools[key] = &generation{node: pool{sl.Spec.Driver, *sl.Spec.NodeName}, gen: sl.Spec.Pool.Generation, count: 1, total: sl.Spec.Pool.ResourceSliceCount}
			case sl.Spec.Pool.Generation == g.gen:
				g.count++
			}
		}
		complete := map[pool]bool{}
		for _, g := range pools {
			if done, ok := complete[g.node]; !ok || done {
				complete[g.node] = g.count >= g.total
			}
		}
		missing = missing[:0]
		for p := range want {
			if !complete[p] {
				missing = append(missing, p.driver+" on "+p.node)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		sort.Strings(missing)
		if len(missing) > 5 {
			missing = append(missing[:5], fmt.Sprintf("and %d more", len(missing)-5))
		}
		return fmt.Errorf("devices not published by %v: %w", missing, err)
	}
	return nil
}

// Apply creates the objects of manifests.
func (s *Sim) Apply(ctx context.Context, objs []apply.Object) error {
	if len(s.realNodes) > 0 {
		objs = forRealNodes(objs)
	}
	return s.applier.Apply(ctx, objs)
}

// Report collects the current state.
func (s *Sim) Report(ctx context.Context) (*report.Report, error) {
	r, err := report.Collect(ctx, s.ControlPlane.Client, s.dyn, s.Cluster.Name, s.containersOf(ctx))
	if err != nil {
		return nil, err
	}
	for _, o := range s.applier.Uncontrolled() {
		gvk := o.GroupVersionKind()
		r.Uncontrolled = append(r.Uncontrolled, report.Object{APIVersion: o.GetAPIVersion(), Kind: gvk.Kind,
			Namespace: o.GetNamespace(), Name: o.GetName(), Source: o.Source,
			Message: fmt.Sprintf("applied; no controller in the simulated cluster runs %s.%s objects, so none of its pods exist (install its operator on a real cluster)", gvk.Kind, gvk.Group)})
	}
	return r, nil
}

// startController runs strata-controller against the control plane as
// the chart's service account, with its webhook on a loopback port that
// the API server reaches for the chart's webhook Service; it returns once
// the webhook admits requests.
func (s *Sim) startController(ctx context.Context) error {
	config := s.ControlPlane.Config
	if id := s.install.controller; id != nil {
		config = id.Config(config)
	}
	o := controller.Options{MetricsAddress: "0", HealthAddress: "0"}
	var unroute func()
	if wh := s.install.webhook; wh != nil {
		port, err := freePort()
		if err != nil {
			return err
		}
		o.Webhook = controller.WebhookOptions{
			Port: port, Host: "127.0.0.1", CertDir: filepath.Join(s.ControlPlane.Dir, "webhook-certs"),
			ManageCertificates: true, Namespace: wh.namespace, ServiceName: wh.service, SecretName: wh.secret, ConfigName: wh.config,
			RouteToScheduler: wh.routeTo, RoutingConfigName: wh.routingConfig,
		}
		unroute = controlplane.RouteService(wh.namespace, wh.service, 443, &url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	}
	mgr, err := controller.NewManager(config, o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "strata-controller stopped")
		}
	}()
	s.stopController = func() {
		cancel()
		<-done
		if unroute != nil {
			unroute()
		}
	}
	if s.install.webhook != nil {
		return waitWebhook(ctx, s.dyn, s.install.release.Namespace)
	}
	return nil
}

// pluginClient is the client of a driver's kubelet plugin on a node: the
// chart's service account for that plugin, with the node's name and UID
// as its pod-bound token carries them.
func (s *Sim) pluginClient(driver, nodeName string, uid types.UID) (kubernetes.Interface, error) {
	id, ok := s.install.plugins[driver]
	if !ok {
		return s.ControlPlane.Client, nil
	}
	return kubernetes.NewForConfig(id.OnNode(nodeName, string(uid)).Config(s.ControlPlane.Config))
}

// PluginClient returns the client the kubelet plugin of driver on node
// runs with, for tests of what that identity may do.
func (s *Sim) PluginClient(driver, nodeName string) (kubernetes.Interface, error) {
	n := s.Nodes.Node(nodeName)
	if n == nil {
		return nil, fmt.Errorf("no node %s", nodeName)
	}
	return s.pluginClient(driver, nodeName, n.Env.NodeUID)
}

// StopController stops strata-controller, webhook included, as an outage
// would; it is safe to call more than once.
func (s *Sim) StopController() {
	if s.stopController != nil {
		s.stopController()
		s.stopController = nil
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Stop shuts the nodes and the control plane down.
func (s *Sim) Stop() {
	for _, n := range s.realNodes {
		n.Stop(context.Background())
	}
	if s.Nodes != nil {
		s.Nodes.Stop()
	}
	s.StopController()
	if s.ControlPlane != nil {
		s.ControlPlane.Stop()
	}
	if s.ownDir {
		os.RemoveAll(s.dir)
	} else {
		// A work directory the user chose keeps the control plane's
		// files (kubeconfig, etcd data); the nodes' folders (sockets,
		// fake sysfs, CDI specs) mean nothing once the nodes are gone.
		os.RemoveAll(filepath.Join(s.dir, nodesDir))
		os.RemoveAll(filepath.Join(s.dir, realNodesDir))
	}
}
