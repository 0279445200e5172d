package realnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/ascend"
)

// TestAscendPluginAndKubeletRestartsOnRealNode: the plugin's process is
// killed while a pod uses an NPU, and the kubelet restarts its container;
// then the kubelet itself is restarted. Through both, the running pod
// keeps its container (no restart) and its claim's CDI spec, and new pods
// still get NPUs. Once every pod is gone, no CDI spec and no checkpoint
// entry is left.
func TestAscendPluginAndKubeletRestartsOnRealNode(t *testing.T) {
	e, n, _ := ascendNode(t)
	ctx := context.Background()
	claimTemplate(t, e, "npu-lifecycle", "ascend-npu.strata.sh", "")
	long := func(name string) *corev1.Pod {
		return createPod(t, e, withClaim(shellPod(name, n.Name(), map[string]string{"main": seeDevices + "; echo seen; sleep 3600"}, "busybox"), "npu-lifecycle", "main"))
	}
	first := long("survivor")
	runningLog(t, e, first, "main", "seen", 3*time.Minute)
	firstClaim := podClaimUID(t, e, first)

	mirror := "strata-ascend-kubelet-plugin-" + n.Name()
	before := restarts(t, e, "strata-system", mirror)
	killed, err := n.KillProcesses("ascend-kubelet-plugin")
	if err != nil || killed != 1 {
		t.Fatalf("killed %d plugin processes (%v), want 1", killed, err)
	}
	waitPod(t, e.client, "strata-system", mirror, 2*time.Minute, func(p *corev1.Pod) bool {
		return restartCount(p) > before && p.Status.ContainerStatuses[0].State.Running != nil
	})
	second := long("after-plugin-restart")
	if out := runningLog(t, e, second, "main", "seen", 3*time.Minute); len(davinciDev.FindAllString(out, -1)) != 1 {
		t.Errorf("a pod started after the plugin restarted sees %q, want one NPU", davinciDev.FindAllString(out, -1))
	}

	n.StopKubelet()
	if err := n.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	third := long("after-kubelet-restart")
	if out := runningLog(t, e, third, "main", "seen", 3*time.Minute); len(davinciDev.FindAllString(out, -1)) != 1 {
		t.Errorf("a pod started after the kubelet restarted sees %q, want one NPU", davinciDev.FindAllString(out, -1))
	}
	cur, err := e.client.CoreV1().Pods(first.Namespace).Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status.Phase != corev1.PodRunning || restartCount(cur) != 0 {
		t.Errorf("the first pod is %s with %d restarts after the plugin and kubelet restarts, want Running with none", cur.Status.Phase, restartCount(cur))
	}
	if specs := specsOf(t, n.CDIDir(), firstClaim); len(specs) != 1 {
		t.Errorf("the running pod's claim has CDI specs %v, want its one", specs)
	}

	var claims []string
	for _, p := range []*corev1.Pod{first, second, third} {
		claims = append(claims, podClaimUID(t, e, p))
		if err := e.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := filepath.Join(n.KubeletDir(), "plugins", ascend.DriverName, "checkpoint.json")
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(checkpoint)
		if err != nil {
			return false, nil
		}
		for _, uid := range claims {
			if len(specsOf(t, n.CDIDir(), uid)) > 0 || strings.Contains(string(data), uid) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		data, _ := os.ReadFile(checkpoint)
		t.Fatalf("after the pods went, a claim's CDI spec or checkpoint entry stayed (claims %v):\n%s", claims, data)
	}
}

func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func restarts(t *testing.T, e *env, ns, name string) int32 {
	t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return restartCount(p)
}

// TestAscendPluginRollingUpdateOnRealNode: a rolling update as the
// chart's DaemonSet does it (maxSurge 1): a second plugin pod starts
// beside the first, then the first goes. A pod that started under the old
// plugin keeps running and is cleaned up by the new one; pods started
// during and after the update get NPUs.
func TestAscendPluginRollingUpdateOnRealNode(t *testing.T) {
	e, n, hw := ascendNode(t)
	ctx := context.Background()
	claimTemplate(t, e, "npu-rolling", "ascend-npu.strata.sh", "")
	long := func(name string) *corev1.Pod {
		return createPod(t, e, withClaim(shellPod(name, n.Name(), map[string]string{"main": seeDevices + "; echo seen; sleep 3600"}, "busybox"), "npu-rolling", "main"))
	}
	old := long("under-old-plugin")
	runningLog(t, e, old, "main", "seen", 3*time.Minute)
	oldClaim := podClaimUID(t, e, old)

	ds := ascendDaemonSet(t, n, hw)
	newPod := e.runPluginAs(t, n, ds, ds.Name+"-surge", hw.root)
	during := long("during-update")
	runningLog(t, e, during, "main", "seen", 3*time.Minute)

	if err := n.RemoveStaticPod(ds.Name); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, "strata-system", ds.Name+"-"+n.Name())
	after := long("after-update")
	if out := runningLog(t, e, after, "main", "seen", 3*time.Minute); len(davinciDev.FindAllString(out, -1)) != 1 {
		t.Errorf("a pod started after the update sees %q, want one NPU", davinciDev.FindAllString(out, -1))
	}
	if err := e.client.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return len(specsOf(t, n.CDIDir(), oldClaim)) == 0, nil
	})
	if err != nil {
		t.Errorf("the new plugin (%s) did not release the claim prepared by the old one: CDI specs %v", newPod, specsOf(t, n.CDIDir(), oldClaim))
	}
	// Leave the node as the other tests expect it: one plugin pod named
	// as the DaemonSet's.
	e.runPluginAs(t, n, ds, ds.Name, hw.root)
	if err := n.RemoveStaticPod(ds.Name + "-surge"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, "strata-system", ds.Name+"-surge-"+n.Name())
}

// waitGone waits for a pod to be deleted.
func waitGone(t *testing.T, e *env, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s is still there", ns, name)
	}
}
