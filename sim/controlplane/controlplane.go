// Package controlplane runs a real Kubernetes 1.37 control plane inside the
// current process: embedded etcd, kube-apiserver, the ResourceClaim
// controller and kube-scheduler built with Strata's plugins. Tests,
// benchmarks and strata-sim all stand on it.
package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
	schedconfig "github.com/strata-sh/strata/scheduler-plugins/config"
)

// Options configure a control plane. The zero value runs a stock 1.37
// cluster (all DRA features that are on by default) with Strata's
// scheduler profiles.
type Options struct {
	// Dir holds etcd data, certificates and configuration. Empty means a
	// new temporary directory, removed on Stop.
	Dir string
	// FeatureGates are passed to the API server and, because gates are
	// process-wide, apply to every component in the process.
	FeatureGates map[string]bool
	// RuntimeConfig enables API groups, e.g. "scheduling.k8s.io/v1alpha2=true".
	RuntimeConfig []string
	// SchedulerConfig is a KubeSchedulerConfiguration; nil means the one
	// strata-scheduler ships with.
	SchedulerConfig []byte
	// SchedulerIdentity, if set, is who the scheduler runs as (its
	// service account); nil means the admin.
	SchedulerIdentity *Identity
	// Plugins are the out-of-tree scheduler plugins; nil means Strata's.
	Plugins runtime.Registry
	// NoScheduler leaves the scheduler out, for tests that drive
	// allocation themselves.
	NoScheduler bool
	// KubeScheduler also runs upstream kube-scheduler, as a cluster does
	// beside strata-scheduler: the default profile only (no Strata
	// plugin), serving pods that name no scheduler (default-scheduler),
	// as the user system:kube-scheduler with its bootstrap RBAC.
	KubeScheduler bool
	// Bootstrap runs once the API server is up and before controllers and
	// the scheduler start, to create what they need (CRDs).
	Bootstrap func(ctx context.Context, config *restclient.Config) error

	// LeaderElection runs SchedulerReplicas replicas of strata-scheduler
	// (at least one) with kube-scheduler's leader election, each behind a
	// wire of the fault layer of its own (KillScheduler cuts it).
	LeaderElection *LeaderElection
	// SchedulerReplicas is how many scheduler replicas LeaderElection
	// runs; the chart deploys two.
	SchedulerReplicas int
	// FaultLayer puts the scheduler (without LeaderElection) behind the
	// fault layer too: SetFault then refuses or slows its requests.
	FaultLayer bool
	// APIServerRestarts lets RestartAPIServer restart kube-apiserver:
	// clients then authenticate with a token and trust a certificate that
	// outlive a restart, instead of the API server's own loopback
	// credentials, which do not.
	APIServerRestarts bool
}

// ControlPlane is a running in-process control plane.
type ControlPlane struct {
	// Config is an admin client configuration for the API server.
	Config *restclient.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// Dir is the working directory.
	Dir string

	ctx    context.Context
	cancel context.CancelFunc
	opts   Options
	// restart starts the scheduler again; schedStop stops the running one
	// and waits for it. Both are nil with leader election, whose replicas
	// are in replicas.
	restart   func() error
	schedStop func()
	replicas  []*replica
	etcd      *etcdServer
	// apiMu guards api and apiStop, which stops it.
	apiMu    sync.Mutex
	api      *apiServer
	apiStop  context.CancelFunc
	faults   faults
	wiresMu  sync.Mutex
	wires    []*Wire
	ownDir   bool
	stopOnce sync.Once
}

// Start boots etcd, kube-apiserver, the controllers and the scheduler and
// returns once the scheduler has synced its caches.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, finalErr error) {
	logger := klog.FromContext(ctx)
	cp := &ControlPlane{Dir: opts.Dir, opts: opts}
	if cp.Dir == "" {
		dir, err := os.MkdirTemp("", "strata-cp-")
		if err != nil {
			return nil, err
		}
		cp.Dir, cp.ownDir = dir, true
	}
	ctx, cp.cancel = context.WithCancel(ctx)
	cp.ctx = ctx
	defer func() {
		if finalErr != nil {
			cp.Stop()
		}
	}()

	var err error
	if cp.etcd, err = startEtcd(ctx, cp.Dir); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(0); err != nil {
		return nil, err
	}
	cp.Config = cp.api.config
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	if opts.Bootstrap != nil {
		if err := opts.Bootstrap(ctx, cp.Config); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	if err := startControllers(ctx, cp.Config, cp.Client); err != nil {
		return nil, err
	}
	if !opts.NoScheduler {
		config := opts.SchedulerConfig
		if config == nil {
			config = schedconfig.Default()
		}
		plugins := opts.Plugins
		if plugins == nil {
			plugins = schedulerplugins.Registry()
		}
		schedKubeconfig := kubeconfig
		if id := opts.SchedulerIdentity; id != nil {
			schedKubeconfig = filepath.Join(cp.Dir, "scheduler.kubeconfig")
			if err := cp.writeKubeconfig(schedKubeconfig, id); err != nil {
				return nil, err
			}
		}
		if opts.LeaderElection != nil {
			if err := cp.startReplicas(ctx, max(1, opts.SchedulerReplicas), schedulerSetup{config, plugins, opts.SchedulerIdentity}); err != nil {
				return nil, err
			}
		} else {
			cp.restart = func() error {
				kubeconfig := schedKubeconfig
				var wire *Wire
				if opts.FaultLayer {
					var err error
					if wire, err = newWire("scheduler", &cp.faults, cp.Config); err != nil {
						return err
					}
					kubeconfig = filepath.Join(cp.Dir, "scheduler-wire.kubeconfig")
					if err := cp.writeKubeconfigVia(kubeconfig, opts.SchedulerIdentity, wire); err != nil {
						return err
					}
				}
				schedCtx, cancel := context.WithCancel(ctx)
				run, err := startScheduler(schedCtx, cp.Dir, kubeconfig, config, plugins, nil, nil)
				if err != nil {
					cancel()
					return err
				}
				cp.schedStop = func() {
					if wire != nil {
						wire.Cut()
					}
					cancel()
					<-run.done
				}
				return nil
			}
			if err := cp.restart(); err != nil {
				return nil, err
			}
		}
	}
	if opts.KubeScheduler {
		if err := cp.startKubeScheduler(ctx); err != nil {
			return nil, err
		}
	}
	logger.V(1).Info("Control plane ready", "host", cp.Config.Host, "dir", cp.Dir)
	return cp, nil
}

// KubeSchedulerUser is who the upstream kube-scheduler of
// Options.KubeScheduler runs as.
const KubeSchedulerUser = "system:kube-scheduler"

// kubeSchedulerConfig is kube-scheduler's configuration with every
// default: one profile, default-scheduler.
const kubeSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
`

func (cp *ControlPlane) startKubeScheduler(ctx context.Context) error {
	dir := filepath.Join(cp.Dir, "kube-scheduler")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.writeKubeconfig(kubeconfig, &Identity{User: KubeSchedulerUser, Groups: []string{"system:authenticated"}}); err != nil {
		return err
	}
	ctx = klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), "kube"))
	_, err := startScheduler(ctx, dir, kubeconfig, []byte(kubeSchedulerConfig), runtime.Registry{}, nil, nil)
	return err
}

// RestartScheduler stops the scheduler, as a crash or a new leader would,
// and starts a new one with empty in-memory state; it returns once the
// new one has synced its caches.
func (cp *ControlPlane) RestartScheduler() error {
	if cp.replicas != nil {
		return fmt.Errorf("the scheduler runs replicas with leader election: use KillScheduler")
	}
	if cp.restart == nil {
		return fmt.Errorf("the control plane runs no scheduler")
	}
	cp.schedStop()
	return cp.restart()
}

// Stop shuts everything down and waits for the API server to exit. It is
// safe to call more than once.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		cp.cancel()
		cp.wiresMu.Lock()
		for _, w := range cp.wires {
			w.Cut()
		}
		cp.wiresMu.Unlock()
		cp.apiMu.Lock()
		if cp.api != nil {
			cp.api.wait()
		}
		cp.apiMu.Unlock()
		if cp.etcd != nil {
			cp.etcd.stop()
		}
		if cp.ownDir {
			os.RemoveAll(cp.Dir)
		}
	})
}

// WriteKubeconfig writes an admin kubeconfig for this control plane, usable
// by kubectl.
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	return cp.writeKubeconfig(path, nil)
}

// WriteKubeconfigAs writes a kubeconfig that acts as id: what a
// component outside the process (a kubelet plugin on a real node) uses in
// place of its service account token.
func (cp *ControlPlane) WriteKubeconfigAs(path string, id Identity) error {
	return cp.writeKubeconfig(path, &id)
}

// writeKubeconfig writes a kubeconfig that acts as id (admin if nil).
func (cp *ControlPlane) writeKubeconfig(path string, id *Identity) error {
	return cp.writeKubeconfigVia(path, id, nil)
}

// writeKubeconfigVia writes a kubeconfig that acts as id (admin if nil)
// and reaches the API server through wire (directly if nil).
func (cp *ControlPlane) writeKubeconfigVia(path string, id *Identity, wire *Wire) error {
	c := cp.Config
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["strata-sim"] = &clientcmdapi.Cluster{
		Server:                   c.Host,
		CertificateAuthorityData: c.TLSClientConfig.CAData,
		TLSServerName:            c.TLSClientConfig.ServerName,
		InsecureSkipTLSVerify:    c.TLSClientConfig.Insecure,
	}
	if wire != nil {
		cfg.Clusters["strata-sim"] = &clientcmdapi.Cluster{Server: wire.URL(), CertificateAuthorityData: wire.caPEM}
	}
	auth := &clientcmdapi.AuthInfo{Token: c.BearerToken}
	if id != nil {
		auth.Impersonate, auth.ImpersonateGroups, auth.ImpersonateUserExtra = id.User, id.Groups, id.Extra
	}
	cfg.AuthInfos["admin"] = auth
	cfg.Contexts["strata-sim"] = &clientcmdapi.Context{Cluster: "strata-sim", AuthInfo: "admin"}
	cfg.CurrentContext = "strata-sim"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
