package realnode

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/ascend"
)

// TestAscendNewerCheckpointOnRealNode: a rollout wrote the checkpoint in
// a newer layout, then the plugin of the release before it starts again
// (the rollout rolled back, or the old pod restarted mid-update). It
// refuses to serve, with an event, and leaves everything alone: the
// running pod keeps its container and its vNPU, the vNPU's device node and
// the claim's CDI spec stay, and the file is not rewritten. Once a release
// that reads the checkpoint runs again, the plugin serves and releases the
// vNPU when the pod goes.
func TestAscendNewerCheckpointOnRealNode(t *testing.T) {
	e, n, hw := ascendNode(t)
	ctx := context.Background()
	claimTemplate(t, e, "vnpu-upgrade", "ascend-vnpu.strata.sh", `device.attributes["ascend.strata.sh"].template == "vir05_1c_16g"`)
	p := createPod(t, e, withClaim(shellPod("vnpu-upgrade", n.Name(), map[string]string{"server": seeDevices + "; echo seen; sleep 3600"}, "busybox"), "vnpu-upgrade", "server"))
	out := runningLog(t, e, p, "server", "seen", 3*time.Minute)
	vnpus := regexp.MustCompile(`dev /dev/vdavinci(\d+) `).FindAllStringSubmatch(out, -1)
	if len(vnpus) != 1 {
		t.Fatalf("container sees vNPU nodes %v, want one:\n%s", vnpus, out)
	}
	hostNode := hw.path("dev/vdavinci" + vnpus[0][1])
	claimUID := podClaimUID(t, e, p)

	checkpoint := filepath.Join(n.KubeletDir(), "plugins", ascend.DriverName, "checkpoint.json")
	raw, err := os.ReadFile(checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	const v1, v2 = `"plugin.strata.sh/checkpoint/v1"`, `"plugin.strata.sh/checkpoint/v2"`
	newer := bytes.Replace(raw, []byte(v1), []byte(v2), 1)
	if bytes.Equal(newer, raw) {
		t.Fatalf("the checkpoint names no version %s:\n%s", v1, raw)
	}
	if err := os.WriteFile(checkpoint, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	mirror := "strata-ascend-kubelet-plugin-" + n.Name()
	before := restarts(t, e, "strata-system", mirror)
	if killed, err := n.KillProcesses("ascend-kubelet-plugin"); err != nil || killed != 1 {
		t.Fatalf("killed %d plugin processes (%v), want 1", killed, err)
	}
	// Proof the restarted plugin met the checkpoint: its event.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := e.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=CheckpointVersionUnknown,involvedObject.name=" + n.Name()})
		return err == nil && len(events.Items) > 0, nil
	})
	if err != nil {
		t.Fatalf("no CheckpointVersionUnknown event from the restarted plugin")
	}
	waitPod(t, e.client, "strata-system", mirror, 2*time.Minute, func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return restartCount(p) > before && len(cs) == 1 && cs[0].State.Running == nil
	})
	if got, _ := os.ReadFile(checkpoint); !bytes.Equal(got, newer) {
		t.Errorf("the newer checkpoint was rewritten:\n%s", got)
	}
	if _, err := os.Stat(hostNode); err != nil {
		t.Errorf("the running pod's vNPU node is gone: %v", err)
	}
	if specs := specsOf(t, n.CDIDir(), claimUID); len(specs) != 1 {
		t.Errorf("the running pod's claim has CDI specs %v, want its one", specs)
	}
	cur, err := e.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status.Phase != corev1.PodRunning || restartCount(cur) != 0 {
		t.Errorf("the pod is %s with %d restarts, want Running with none", cur.Status.Phase, restartCount(cur))
	}

	// Roll forward: a release that reads the checkpoint.
	if err := os.WriteFile(checkpoint, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	waitPod(t, e.client, "strata-system", mirror, 3*time.Minute, func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Running != nil && cs[0].Ready
	})
	if err := e.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := os.Stat(hostNode)
		return os.IsNotExist(err) && len(specsOf(t, n.CDIDir(), claimUID)) == 0, nil
	})
	if err != nil {
		t.Fatalf("after the pod went, its vNPU node or CDI spec stayed")
	}
}
