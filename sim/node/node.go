// Package node simulates Kubernetes nodes for DRA: a Node object, the
// node's kubelet plugins running in process on fake hardware, and the part
// of kubelet that drives them. For every pod bound to the node it calls
// NodePrepareResources over the plugin's gRPC socket, resolves the returned
// CDI device IDs against the node's CDI spec directory as a container
// runtime would, and marks the pod Running; when the pod is deleted it
// calls NodeUnprepareResources and finalizes the deletion.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// sharedDir is the folder, beside the node folders, of PluginEnv.SharedDir
// (node names cannot start with a dot).
const sharedDir = ".shared"

// maxSocketPath is the longest path a unix socket can be bound to on Linux.
const maxSocketPath = 107

// Spec describes one simulated node.
type Spec struct {
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Capacity is reported as both capacity and allocatable.
	Capacity corev1.ResourceList
	// Plugins are the kubelet plugins that run on the node.
	Plugins []PluginFactory
	// Hardware is the node's fake hardware, for tests to inspect.
	Hardware any
	// Prepare, if set, lays out the node's fake hardware under the node
	// root before any plugin starts.
	Prepare func(env PluginEnv) error
}

// PluginEnv is what a kubelet plugin on a simulated node is given: the same
// things a DaemonSet pod would get through its host mounts and downward
// API.
type PluginEnv struct {
	NodeName string
	NodeUID  types.UID
	Client   kubernetes.Interface
	// Root is the node's private directory (see package hardware).
	Root string
	// SharedDir is shared by the cluster's nodes, for what identical
	// machines have in common and nobody writes: the fake sysfs and procfs
	// of a hardware layout.
	SharedDir string
	// RegistryDir is the kubelet plugin registration directory.
	RegistryDir string
	// CDIDir is the container runtime's CDI spec directory.
	CDIDir string
	// Events sends events; the simulated nodes share one broadcaster, as
	// they share the process.
	Events record.EventBroadcaster
}

// PluginDir returns the data directory of one driver's plugin.
func (e PluginEnv) PluginDir(driver string) string {
	return filepath.Join(e.Root, "plugins", driver)
}

// PluginClientFunc returns the client of a driver's kubelet plugin on a
// node: the identity its DaemonSet pod's service account token has there.
type PluginClientFunc func(driver, node string, uid types.UID) (kubernetes.Interface, error)

// Plugin is a running kubelet plugin.
type Plugin interface {
	Stop()
}

// PluginFactory starts one driver's plugin on a node.
type PluginFactory struct {
	Driver string
	Start  func(ctx context.Context, env PluginEnv) (Plugin, error)
}

// Node is a simulated node with its plugins.
type Node struct {
	Spec Spec
	Env  PluginEnv

	clients *pluginClients
	// pluginClient gives each driver's plugin its identity (nil: the
	// node's client).
	pluginClient PluginClientFunc
	runtime      *containerRuntime
	health       *healthCache

	mu      sync.Mutex
	plugins map[string]Plugin
	// claims are the prepared claims of the node, by UID, with the pods
	// using each; a claim is unprepared when its last pod goes.
	claims map[types.UID]*preparedClaim
}

type preparedClaim struct {
	namespace, name string
	drivers         []string
	pods            map[types.UID]bool
}

// newNode creates the Node object and the node's directories and starts
// its plugins.
func newNode(ctx context.Context, client kubernetes.Interface, pluginClient PluginClientFunc, events record.EventBroadcaster, baseDir string, spec Spec, watchCtx context.Context, healthChanged func(*Node, []deviceKey)) (*Node, error) {
	obj, err := createNodeObject(ctx, client, spec)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(baseDir, spec.Name)
	env := PluginEnv{
		NodeName:    spec.Name,
		NodeUID:     obj.UID,
		Client:      client,
		Root:        root,
		SharedDir:   filepath.Join(baseDir, sharedDir),
		RegistryDir: filepath.Join(root, "registry"),
		CDIDir:      filepath.Join(root, "cdi"),
		Events:      events,
	}
	for _, p := range spec.Plugins {
		if sock := filepath.Join(env.PluginDir(p.Driver), "dra.sock"); len(sock) > maxSocketPath {
			return nil, fmt.Errorf("node %s: socket path %s is longer than %d bytes; use a shorter work directory", spec.Name, sock, maxSocketPath)
		}
	}
	for _, dir := range []string{env.RegistryDir, env.CDIDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	if spec.Prepare != nil {
		if err := spec.Prepare(env); err != nil {
			return nil, fmt.Errorf("node %s: prepare hardware: %w", spec.Name, err)
		}
	}
	rt, err := newContainerRuntime(env.CDIDir)
	if err != nil {
		return nil, err
	}
	n := &Node{
		Spec:    spec,
		Env:     env,
		runtime: rt,
		health:  newHealthCache(),
		plugins: map[string]Plugin{},
		claims:  map[types.UID]*preparedClaim{},

		pluginClient: pluginClient,
	}
	n.clients = newPluginClients(watchCtx, env.RegistryDir, n.health, func(keys []deviceKey) { healthChanged(n, keys) })
	for _, p := range spec.Plugins {
		if err := n.startPlugin(ctx, p); err != nil {
			n.stop()
			return nil, err
		}
	}
	return n, nil
}

func (n *Node) startPlugin(ctx context.Context, p PluginFactory) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", n.Spec.Name, "driver", p.Driver)
	env := n.Env
	if n.pluginClient != nil {
		client, err := n.pluginClient(p.Driver, n.Spec.Name, n.Env.NodeUID)
		if err != nil {
			return fmt.Errorf("node %s: client of the %s plugin: %w", n.Spec.Name, p.Driver, err)
		}
		env.Client = client
	}
	plugin, err := p.Start(klog.NewContext(ctx, logger), env)
	if err != nil {
		return fmt.Errorf("node %s: start %s plugin: %w", n.Spec.Name, p.Driver, err)
	}
	n.mu.Lock()
	n.plugins[p.Driver] = plugin
	n.mu.Unlock()
	// Register it now, as kubelet does when the socket appears, so its
	// device health is followed before any pod needs it.
	return n.clients.scan(ctx)
}

// RestartPlugin stops a driver's plugin and starts a new instance on the
// same directories, as when its DaemonSet pod is replaced.
func (n *Node) RestartPlugin(ctx context.Context, driver string) error {
	n.mu.Lock()
	old := n.plugins[driver]
	delete(n.plugins, driver)
	n.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	for _, p := range n.Spec.Plugins {
		if p.Driver == driver {
			return n.startPlugin(ctx, p)
		}
	}
	return fmt.Errorf("node %s has no %s plugin", n.Spec.Name, driver)
}

// Plugin returns the running plugin of a driver, or nil.
func (n *Node) Plugin(driver string) Plugin {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.plugins[driver]
}

func (n *Node) stop() {
	n.mu.Lock()
	plugins := n.plugins
	n.plugins = map[string]Plugin{}
	n.mu.Unlock()
	for _, p := range plugins {
		p.Stop()
	}
	n.clients.close()
}

func createNodeObject(ctx context.Context, client kubernetes.Interface, spec Spec) (*corev1.Node, error) {
	labels := map[string]string{
		corev1.LabelHostname:   spec.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: spec.Taints},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = client.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create node %s: %w", spec.Name, err)
	}
	created.Status = corev1.NodeStatus{
		Capacity:    spec.Capacity,
		Allocatable: spec.Capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "simulated kubelet is posting ready status", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64", ContainerRuntimeVersion: "strata-sim://1"},
	}
	updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("set status of node %s: %w", spec.Name, err)
	}
	return updated, nil
}
