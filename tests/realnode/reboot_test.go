package realnode

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/ascend"
	"github.com/strata-sh/strata/hardware"
)

// TestAscendNodeRebootOnRealNode: the node is power-cycled under a running
// pod with a vNPU (containers, runtime state and CDI specs gone, a new boot
// id, the NPUs' vNPUs gone with the reset). When the node is back, the
// pod's container is started again and sees a vNPU again; once the pod
// goes, no vNPU, device node, CDI spec or checkpoint entry is left.
func TestAscendNodeRebootOnRealNode(t *testing.T) {
	e, n, hw := ascendNode(t)
	ctx := context.Background()
	claimTemplate(t, e, "vnpu-reboot", "ascend-vnpu.strata.sh", `device.attributes["ascend.strata.sh"].template == "vir05_1c_16g"`)
	p := shellPod("survives-reboot", n.Name(), map[string]string{"server": seeDevices + "; echo seen; sleep 3600"}, "busybox")
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	p = createPod(t, e, withClaim(p, "vnpu-reboot", "server"))
	before := runningLog(t, e, p, "server", "seen", 3*time.Minute)
	vnpu := regexp.MustCompile(`/dev/vdavinci\d+`)
	if len(vnpu.FindAllString(before, -1)) != 1 {
		t.Fatalf("before the reboot the container sees vNPUs %q, want one:\n%s", vnpu.FindAllString(before, -1), before)
	}
	claimUID := podClaimUID(t, e, p)

	err := n.Reboot(ctx, func() error {
		if err := hardware.WriteBootID(hw.root, uuid.NewString()); err != nil {
			return err
		}
		// The NPUs come back without vNPUs.
		if err := os.Remove(hw.path("var/npu-smi.state")); err != nil && !os.IsNotExist(err) {
			return err
		}
		nodes, _ := filepath.Glob(hw.path("dev/vdavinci*"))
		for _, f := range nodes {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reboot: %v", err)
	}
	waitPod(t, e.client, p.Namespace, p.Name, 3*time.Minute, func(p *corev1.Pod) bool {
		return restartCount(p) > 0 && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	after := runningLog(t, e, p, "server", "seen", 3*time.Minute)
	if got := vnpu.FindAllString(after, -1); len(got) != 1 {
		t.Errorf("after the reboot the container sees vNPUs %q, want one:\n%s", got, after)
	} else if _, err := os.Stat(hw.path("dev/" + strings.TrimPrefix(got[0], "/dev/"))); err != nil {
		t.Errorf("the container's %s does not exist on the rebooted node: %v", got[0], err)
	}

	if err := e.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(n.KubeletDir(), "plugins", ascend.DriverName, "checkpoint.json")
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(checkpoint)
		nodes, _ := filepath.Glob(hw.path("dev/vdavinci*"))
		return len(nodes) == 0 && len(specsOf(t, n.CDIDir(), claimUID)) == 0 && !strings.Contains(string(data), claimUID), nil
	})
	if err != nil {
		data, _ := os.ReadFile(checkpoint)
		nodes, _ := filepath.Glob(hw.path("dev/vdavinci*"))
		t.Fatalf("after the pod went: vNPU nodes %v, CDI specs %v, checkpoint:\n%s", nodes, specsOf(t, n.CDIDir(), claimUID), data)
	}
}
