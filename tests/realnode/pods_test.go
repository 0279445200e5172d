package realnode

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/sim/realnode"
)

// The suite's one real node, made on first use; it carries the Ascend
// node label so that the Ascend tests run their plugin there.
var (
	nodeOnce sync.Once
	node0    *realnode.Node
)

func realNode(t *testing.T) (*env, *realnode.Node) {
	t.Helper()
	e := suite(t)
	nodeOnce.Do(func() {
		node0 = e.addNode(t, "real-0", map[string]string{"accelerator": "huawei-Ascend910"})
	})
	if node0 == nil {
		t.Fatal("the real node did not start (see the first test's failure)")
	}
	return e, node0
}

// shellPod is a pod on node n whose containers run shell scripts on the
// host network (the harness's nodes have no pod network).
func shellPod(name, node string, containers map[string]string, image string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector:  map[string]string{corev1.LabelHostname: node},
			HostNetwork:   true,
			RestartPolicy: corev1.RestartPolicyNever,
			// The scripts run as PID 1, which ignores SIGTERM.
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	for _, c := range sortedKeys(containers) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: c, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", containers[c]},
		})
	}
	return p
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func createPod(t *testing.T, e *env, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := e.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	})
	return created
}

// TestRealNodeRunsCommonImages: pods that name common public images run
// the local busybox image on the real node, and their output is read
// through the API server as kubectl logs reads it.
func TestRealNodeRunsCommonImages(t *testing.T) {
	e, n := realNode(t)
	for _, image := range []string{"busybox", "ubuntu:22.04"} {
		name := "hello-" + strings.NewReplacer(":", "-", ".", "-").Replace(image)
		p := createPod(t, e, shellPod(name, n.Name(), map[string]string{"main": "echo hello from $(hostname); cat /proc/1/cmdline | tr '\\0' ' '"}, image))
		logs := podLogs(t, e.client, p, 2*time.Minute)
		if !strings.Contains(logs["main"], "hello from") {
			t.Errorf("%s: log %q, want the container's greeting", image, logs["main"])
		}
	}
}

// TestRealNodeExec: kubectl exec's path (API server, kubelet, the
// runtime's streaming server) reaches a running container.
func TestRealNodeExec(t *testing.T) {
	e, n := realNode(t)
	p := createPod(t, e, shellPod("exec-target", n.Name(), map[string]string{"main": "echo started; sleep 3600"}, "busybox"))
	waitPod(t, e.client, p.Namespace, p.Name, 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"sh", "-c", "echo exec-ok $((6*7))"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(e.sim.ControlPlane.Config, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != "exec-ok 42" {
		t.Errorf("exec printed %q, want %q", got, "exec-ok 42")
	}
}
