package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/sim"
	simcluster "github.com/strata-sh/strata/sim/cluster"
	"github.com/strata-sh/strata/sim/controlplane"
	"github.com/strata-sh/strata/sim/realnode"
)

// pluginImages are the plugin binaries the suite builds into images.
var pluginImages = []string{"ascend-kubelet-plugin", "nvidia-kubelet-plugin", "cambricon-kubelet-plugin", "rdma-kubelet-plugin"}

// env is the suite's cluster: the control plane with Strata installed
// (one simulated node beside the real ones, as strata-sim needs one) and
// what the real nodes are made from.
type env struct {
	sim    *sim.Sim
	client kubernetes.Interface
	dir    string
	tools  realnode.Tools
	// bin holds the binaries built for the suite; archives the image
	// archives every real node imports.
	bin      string
	archives []string

	mu    sync.Mutex
	nodes []*realnode.Node
}

var (
	shared    *env
	sharedErr error
	setupOnce sync.Once
)

// cluster returns the suite's cluster, starting it on first use.
func suite(t *testing.T) *env {
	t.Helper()
	if os.Getenv(realnode.ToolsEnv) == "" {
		t.Skipf("$%s is not set: run the suite with make test (or make realnode-tools first)", realnode.ToolsEnv)
	}
	setupOnce.Do(func() { shared, sharedErr = startCluster() })
	if sharedErr != nil {
		t.Fatalf("real-node cluster: %v", sharedErr)
	}
	return shared
}

func stopCluster() {
	if shared == nil {
		return
	}
	ctx := context.Background()
	for _, n := range shared.nodes {
		n.Stop(ctx)
	}
	shared.sim.Stop()
	os.RemoveAll(shared.dir)
}

func startCluster() (_ *env, finalErr error) {
	ctx := context.Background()
	tools, err := realnode.FindTools()
	if err != nil {
		return nil, err
	}
	// Short: kubelet plugin sockets live below it.
	dir, err := os.MkdirTemp("", "srn")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, tools: tools, bin: filepath.Join(dir, "bin")}
	defer func() {
		if finalErr != nil {
			if e.sim != nil {
				e.sim.Stop()
			}
			os.RemoveAll(dir)
		}
	}()
	if err := e.build(ctx); err != nil {
		return nil, err
	}
	c, err := simcluster.Parse([]byte(`apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: sim
  count: 1
`))
	if err != nil {
		return nil, err
	}
	e.sim, err = sim.Start(ctx, sim.Config{
		Cluster: c,
		Dir:     filepath.Join(dir, "s"),
		// kube-scheduler runs beside strata-scheduler, as in a cluster.
		ControlPlane: controlplane.Options{KubeScheduler: true},
		ChartValues:  map[string]any{"plugins": map[string]any{"ascend": map[string]any{"enabled": true}, "cambricon": map[string]any{"enabled": true}, "rdma": map[string]any{"enabled": true}}},
	})
	if err != nil {
		return nil, err
	}
	e.client = e.sim.ControlPlane.Client
	return e, nil
}

// build compiles what the real nodes run from this checkout, as make
// build does, and assembles the images: busybox for pods, and each
// plugin's image as the Dockerfile's target builds it.
func (e *env) build(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	gobuild := func(out, pkg string, cgo bool, ldflags string) error {
		// As make build does (no -trimpath, which the Dockerfile adds):
		// the unit and end-to-end suites have compiled the same packages
		// already, so this links from the build cache.
		cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", ldflags, "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+map[bool]string{true: "1", false: "0"}[cgo],
			"CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		return nil
	}
	for _, p := range pluginImages {
		if err := gobuild(filepath.Join(e.bin, p), "./cmd/"+p, true, ""); err != nil {
			return err
		}
	}
	// The fakes run inside the plugins' containers: static, no libc.
	for _, fake := range []string{"npu-smi", "cnmon"} {
		if err := gobuild(filepath.Join(e.bin, fake), "./hardware/fakebin/"+fake, false, ""); err != nil {
			return err
		}
	}
	busybox, err := realnode.BusyboxImage(e.tools.Busybox)
	if err != nil {
		return err
	}
	images := map[string]realnode.Image{"busybox": busybox}
	for _, p := range pluginImages {
		img, err := realnode.BinaryImage(p, filepath.Join(e.bin, p), sim.ImageRegistry+"/"+p+":"+sim.ImageTag)
		if err != nil {
			return err
		}
		images[p] = img
	}
	for name, img := range images {
		archive := filepath.Join(e.dir, name+".tar")
		if err := img.WriteArchive(archive); err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		e.archives = append(e.archives, archive)
	}
	return nil
}

func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("no caller")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// addNode joins a real node named name with labels.
func (e *env) addNode(t *testing.T, name string, labels map[string]string) *realnode.Node {
	t.Helper()
	ctx := context.Background()
	// Short: kubelet plugin sockets live below it.
	dir := filepath.Join(e.dir, fmt.Sprintf("n%d", len(e.nodes)))
	kubeconfig := filepath.Join(e.dir, "admin.kubeconfig")
	if err := e.sim.ControlPlane.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	n, err := realnode.Start(ctx, e.tools, dir, realnode.Spec{Name: name, Labels: labels, Kubeconfig: kubeconfig}, e.client, e.archives...)
	if err != nil {
		t.Fatalf("real node %s: %v", name, err)
	}
	e.mu.Lock()
	e.nodes = append(e.nodes, n)
	e.mu.Unlock()
	return n
}

// nodeByName returns a real node the suite started.
func (e *env) nodeByName(name string) *realnode.Node {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.nodes {
		if n.Name() == name {
			return n
		}
	}
	return nil
}

// pluginDaemonSet renders the chart's DaemonSet of a vendor's plugin for
// node n (sim.PluginDaemonSet), with values over the suite's.
func pluginDaemonSet(t *testing.T, n *realnode.Node, vendor string, values map[string]any) *appsv1.DaemonSet {
	t.Helper()
	ds, err := sim.PluginDaemonSet(n, vendor, values)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// runPlugin runs the plugin of ds on n as a static pod named as the
// DaemonSet, with hostDirs (the fake hardware) mounted at their paths.
func (e *env) runPlugin(t *testing.T, n *realnode.Node, ds *appsv1.DaemonSet, hostDirs ...string) string {
	t.Helper()
	return e.runPluginAs(t, n, ds, ds.Name, hostDirs...)
}

// runPluginAs is runPlugin with the static pod named name: a second name
// is a second plugin pod beside the first, as a rolling update with
// maxSurge makes.
func (e *env) runPluginAs(t *testing.T, n *realnode.Node, ds *appsv1.DaemonSet, name string, hostDirs ...string) string {
	t.Helper()
	mirror, err := e.sim.RunPlugin(context.Background(), n, ds, name, hostDirs...)
	if err != nil {
		t.Fatal(err)
	}
	return mirror
}

// waitPod waits until cond holds for the pod, failing with its status.
func waitPod(t *testing.T, client kubernetes.Interface, ns, name string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		status, _ := yaml.Marshal(last)
		t.Fatalf("pod %s/%s: %v; last seen:\n%s", ns, name, err, status)
	}
	return last
}

// podDone waits for a pod to succeed and returns each container's log.
func podLogs(t *testing.T, client kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) map[string]string {
	t.Helper()
	waitPod(t, client, pod.Namespace, pod.Name, timeout, func(p *corev1.Pod) bool {
		if p.Status.Phase == corev1.PodFailed {
			status, _ := yaml.Marshal(p.Status)
			t.Fatalf("pod %s failed:\n%s", p.Name, status)
		}
		return p.Status.Phase == corev1.PodSucceeded
	})
	out := map[string]string{}
	for _, c := range pod.Spec.Containers {
		raw, err := client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(context.Background())
		if err != nil {
			t.Fatalf("logs of %s/%s: %v", pod.Name, c.Name, err)
		}
		out[c.Name] = string(raw)
	}
	return out
}
