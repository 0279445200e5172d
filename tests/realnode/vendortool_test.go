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

// TestAscendHungToolOnRealNode: npu-smi wedges (as a tool stuck in the
// driver does). A pod whose vNPU needs it does not hang the plugin: the
// call is killed at the deadline, with everything it started, and the
// kubelet's event on the pod says which command did not answer; the
// plugin stays live (its probes pass, no restart). Once npu-smi answers
// again the kubelet's retry prepares the vNPU and the pod runs.
func TestAscendHungToolOnRealNode(t *testing.T) {
	e, n, hw := ascendNode(t)
	ctx := context.Background()
	mirror := "strata-ascend-kubelet-plugin-" + n.Name()
	before := restarts(t, e, "strata-system", mirror)
	claimTemplate(t, e, "vnpu-hung", "ascend-vnpu.strata.sh", `device.attributes["ascend.strata.sh"].template == "vir05_1c_16g"`)

	hw.npuSMI(t, "strata-fake", "hang", "10m")
	hangEnded := false
	defer func() {
		if !hangEnded {
			hw.npuSMI(t, "strata-fake", "hang", "0s")
		}
	}()
	p := createPod(t, e, withClaim(shellPod("vnpu-hung", n.Name(), map[string]string{"server": seeDevices + "; echo seen; sleep 3600"}, "busybox"), "vnpu-hung", "server"))
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := e.client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name + ",reason=FailedPrepareDynamicResources"})
		if err != nil || len(events.Items) == 0 {
			return false, nil
		}
		msg = events.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no FailedPrepareDynamicResources event while npu-smi hangs")
	}
	if !strings.Contains(msg, "npu-smi") || !strings.Contains(msg, "no answer within "+ascendToolTimeout.String()) {
		t.Errorf("the pod's event says %q, want the npu-smi command and its deadline", msg)
	}
	// Nothing the killed calls started is left: no npu-smi of this
	// machine runs but those still waiting on the hang.
	if left := toolProcesses(t, hw.path("usr/local/bin/npu-smi")); len(left) > 4 {
		t.Errorf("%d npu-smi processes of the fake machine running: %v", len(left), left)
	}
	cur := waitPod(t, e.client, "strata-system", mirror, time.Minute, func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
	})
	if restartCount(cur) != before {
		t.Errorf("the plugin restarted %d times while npu-smi hung", restartCount(cur)-before)
	}

	hw.npuSMI(t, "strata-fake", "hang", "0s")
	hangEnded = true
	out := runningLog(t, e, p, "server", "seen", 3*time.Minute)
	if !strings.Contains(out, "dev /dev/vdavinci") {
		t.Errorf("the pod prepared after the hang sees no vNPU:\n%s", out)
	}
	if err := e.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, p.Namespace, p.Name)
}

// TestAscendUnhealthyNPUOnRealNode: npu-smi reports an NPU in Alarm; the
// plugin taints that NPU (and only it) in its slice with the alarm's
// code, and removes the taint when the NPU recovers.
func TestAscendUnhealthyNPUOnRealNode(t *testing.T) {
	e, n, hw := ascendNode(t)
	taints := func(ctx context.Context) map[string]string {
		out := map[string]string{}
		slices, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		for _, s := range slices.Items {
			if s.Spec.Driver != ascend.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != n.Name() {
				continue
			}
			for _, d := range s.Spec.Devices {
				for _, taint := range d.Taints {
					if taint.Key == ascend.TaintUnhealthy {
						out[d.Name] = taint.Value
					}
				}
			}
		}
		return out
	}
	var seen map[string]string
	// From a healthy machine (an earlier test may have left npu-smi
	// failing for a moment).
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		seen = taints(ctx)
		return seen != nil && len(seen) == 0, nil
	})
	if err != nil {
		t.Fatalf("devices tainted before the fault: %v", seen)
	}
	hw.npuSMI(t, "strata-fake", "fault", "-i", "3", "Alarm", "80E01801")
	defer hw.npuSMI(t, "strata-fake", "recover", "-i", "3")
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		seen = taints(ctx)
		return seen["npu-3"] != "", nil
	})
	if err != nil {
		t.Fatalf("npu-3 not tainted after npu-smi reported it in Alarm; taints %v", seen)
	}
	for dev, value := range seen {
		if dev != "npu-3" && !strings.HasPrefix(dev, "npu-3-") {
			t.Errorf("device %s of a healthy NPU tainted %q", dev, value)
		}
	}
	if !strings.Contains(seen["npu-3"], "80E01801") {
		t.Errorf("npu-3's taint %q does not carry the alarm's code", seen["npu-3"])
	}
	hw.npuSMI(t, "strata-fake", "recover", "-i", "3")
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		seen = taints(ctx)
		return seen != nil && len(seen) == 0, nil
	})
	if err != nil {
		t.Fatalf("taints %v left after the NPU recovered", seen)
	}
}

// toolProcesses lists the running processes of a program, by pid.
func toolProcesses(t *testing.T, program string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/exe")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, exe := range dirs {
		if target, err := os.Readlink(exe); err == nil && target == program {
			out = append(out, filepath.Base(filepath.Dir(exe)))
		}
	}
	return out
}
