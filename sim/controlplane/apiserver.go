package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/egressselector"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/util/keyutil"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

func init() {
	// Several API servers in one process (restarts, tests) would otherwise
	// fight over the global logging configuration.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

// disabledAdmission are admission plugins that depend on controllers the
// simulator does not run: without the service-account controller no pod
// could be created, and without the node lifecycle controller every node
// would keep its not-ready taint.
var disabledAdmission = []string{"ServiceAccount", "TaintNodesByCondition"}

type apiServer struct {
	config *restclient.Config
	port   int
	done   chan error
}

// startAPIServer runs kube-apiserver in process against etcdURL, on port
// (0: a free one).
func startAPIServer(ctx context.Context, dir, etcdURL string, port int, opts Options) (*apiServer, error) {
	certDir := filepath.Join(dir, "apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	saKey, err := writeServiceAccountKey(certDir)
	if err != nil {
		return nil, err
	}
	var stable *stableAccess
	if opts.APIServerRestarts {
		if stable, err = writeStableAccess(certDir); err != nil {
			return nil, err
		}
	}

	// Feature gates are set on a copy first and then carried to the global
	// gate only where they differ, so a second control plane in the same
	// process with the same gates does not try to change a gate that is
	// already in use.
	featureGate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	effectiveVersion := compatibility.DefaultBuildEffectiveVersion()
	effectiveVersion.SetEmulationVersion(featureGate.EmulationVersion())
	effectiveVersion.SetMinCompatibilityVersion(featureGate.MinCompatibilityVersion())
	registry := basecompatibility.NewComponentGlobalsRegistry()
	if err := registry.Register(basecompatibility.DefaultKubeComponent, effectiveVersion, featureGate); err != nil {
		return nil, err
	}

	s := options.NewServerRunOptions()
	s.GenericServerRunOptions.ComponentGlobalsRegistry = registry
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	listener, port, err := listenLoopback(ctx, port)
	if err != nil {
		return nil, err
	}
	s.SecureServing.Listener, s.SecureServing.BindPort = listener, port
	s.SecureServing.ServerCert.CertDirectory = certDir
	s.SecureServing.ExternalAddress = net.ParseIP("127.0.0.1")
	s.ServiceClusterIPRanges = "10.0.0.0/16"
	s.Etcd.StorageConfig = *storagebackend.NewDefaultConfig("/registry", nil)
	s.Etcd.StorageConfig.Transport.ServerList = []string{etcdURL}
	s.ServiceAccountSigningKeyFile = saKey
	s.Authentication.ServiceAccounts.Issuers = []string{"https://kubernetes.default.svc"}
	s.Authentication.ServiceAccounts.KeyFiles = []string{saKey}

	// No metric label allow-list: without this the metrics options log an
	// error about an empty manifest file.
	s.Metrics.AllowListMapping = map[string]string{}
	flags := []string{
		"--disable-admission-plugins=" + strings.Join(disabledAdmission, ","),
		// As on a real cluster: components run under their service
		// accounts and get only what the chart's RBAC grants them.
		"--authorization-mode=RBAC",
		// As kubeadm and managed clusters do: kubelet plugins run
		// privileged.
		"--allow-privileged=true",
		// The kubernetes Service would point at a loopback address, which
		// the endpoints API rejects; nothing in the cluster uses it.
		"--endpoint-reconciler-type=none",
	}
	if stable != nil {
		flags = append(flags, "--token-auth-file="+stable.tokenFile)
	}
	if len(opts.RuntimeConfig) > 0 {
		flags = append(flags, "--runtime-config="+strings.Join(opts.RuntimeConfig, ","))
	}
	if len(opts.FeatureGates) > 0 {
		flags = append(flags, "--feature-gates="+gateFlag(opts.FeatureGates))
	}
	if err := fs.Parse(flags); err != nil {
		listener.Close()
		return nil, err
	}
	if err := registry.Set(); err != nil {
		listener.Close()
		return nil, fmt.Errorf("feature gates: %w", err)
	}
	if err := applyGlobalGates(featureGate); err != nil {
		listener.Close()
		return nil, err
	}

	completed, err := s.Complete(ctx)
	if err != nil {
		listener.Close()
		return nil, fmt.Errorf("complete kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		listener.Close()
		return nil, fmt.Errorf("kube-apiserver options: %w", utilerrors.NewAggregate(errs))
	}
	installServiceRoutes()
	config, err := app.NewConfig(completed)
	if err != nil {
		return nil, err
	}
	config.KubeAPIs.Extra.KubeletClientConfig.Lookup = kubeletDialer
	completedConfig, err := config.Complete()
	if err != nil {
		return nil, err
	}
	server, err := app.CreateServerChain(completedConfig)
	if err != nil {
		return nil, fmt.Errorf("create kube-apiserver: %w", err)
	}
	a := &apiServer{port: port, done: make(chan error, 1)}
	go func() {
		defer close(a.done)
		prepared, err := server.PrepareRun()
		if err == nil {
			err = prepared.Run(ctx)
		}
		if err != nil {
			a.done <- err
		}
	}()

	a.config = restclient.CopyConfig(server.GenericAPIServer.LoopbackClientConfig)
	a.config.QPS, a.config.Burst = 5000, 10000
	if stable != nil {
		stable.apply(a.config)
	}
	if err := a.waitReady(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// waitReady waits for /readyz and for the default namespace, which the
// API server creates itself shortly after start.
func (a *apiServer) waitReady(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(a.config)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-a.done:
			if err == nil {
				err = errors.New("kube-apiserver exited")
			}
			return false, err
		default:
		}
		status := 0
		client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status != 200 {
			return false, nil
		}
		_, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for kube-apiserver: %w", err)
	}
	return nil
}

// wait blocks until the server has shut down after its context ended.
func (a *apiServer) wait() {
	for range a.done {
	}
}

// applyGlobalGates copies to the process-wide gate the values in gate that
// differ from it, because most of Kubernetes reads the global gate.
func applyGlobalGates(gate featuregate.MutableVersionedFeatureGate) error {
	overrides := map[string]bool{}
	for f := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		if gate.Enabled(f) != utilfeature.DefaultFeatureGate.Enabled(f) {
			overrides[string(f)] = gate.Enabled(f)
		}
	}
	if len(overrides) == 0 {
		return nil
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(overrides); err != nil {
		return fmt.Errorf("feature gates %v: %w (gates are process-wide and cannot change once used)", overrides, err)
	}
	return nil
}

func gateFlag(gates map[string]bool) string {
	parts := make([]string, 0, len(gates))
	for name, on := range gates {
		parts = append(parts, fmt.Sprintf("%s=%t", name, on))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// kubeletDialer connects the API server to kubelets (logs, exec,
// port-forward, node proxy). Every kubelet of this control plane runs on
// this machine and listens on loopback at the port its Node reports, so
// the address the API server picks (the node's name, by default) is
// replaced by 127.0.0.1: nothing leaves the machine and no name has to
// resolve.
func kubeletDialer(egressselector.NetworkContext) (utilnet.DialFunc, error) {
	var d net.Dialer
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}, nil
}

// listenLoopback listens on port of the loopback address, a free one if
// port is 0. A given port may still be held for a moment by the server
// that used it before: that is retried for up to 30 s.
func listenLoopback(ctx context.Context, port int) (net.Listener, int, error) {
	var l net.Listener
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil && port != 0 {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("listen on 127.0.0.1:%d: %w", port, err)
	}
	return l, l.Addr().(*net.TCPAddr).Port, nil
}

// writeServiceAccountKey creates the key the API server signs service
// account tokens with; it is required even though nothing here uses them.
func writeServiceAccountKey(dir string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	pem, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "sa.key")
	if err := keyutil.WriteKey(path, pem); err != nil {
		return "", err
	}
	return path, nil
}
