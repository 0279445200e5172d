package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/nvidia"
)

// gpuHealth returns the health the kubelet reports for the devices of a
// pod's claim entry in its main container's status.
func (e *env) gpuHealth(ns, name, entry string) (corev1.ResourceHealth, bool) {
	p, err := e.client.CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return corev1.ResourceHealth{}, false
	}
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			if string(rs.Name) == "claim:"+entry && len(rs.Resources) == 1 {
				return rs.Resources[0], true
			}
		}
	}
	return corev1.ResourceHealth{}, false
}

func (e *env) waitGPUHealth(ns, name string, want corev1.ResourceHealthStatus, msgPart string) corev1.ResourceHealth {
	e.t.Helper()
	var got corev1.ResourceHealth
	e.eventually(30*time.Second, "pod status shows the GPU "+string(want), func(context.Context) (bool, error) {
		h, ok := e.gpuHealth(ns, name, "gpu")
		got = h
		return ok && h.Health == want && (msgPart == "" || (h.Message != nil && strings.Contains(*h.Message, msgPart))), nil
	})
	return got
}

// TestUnhealthyGPUInPodStatusAndEviction: the kubelet shows the health of
// the GPU a pod holds in the pod's status; a critical XID makes it
// Unhealthy (NoSchedule: the pod stays); the GPU falling off the bus
// taints it NoExecute, and the device-taint eviction controller evicts
// the pod, whose claim is then released and unprepared; when the GPU
// comes back its taints are removed and it is allocatable again.
func TestUnhealthyGPUInPodStatusAndEviction(t *testing.T) {
	e := startCluster(t, oneH100Node)
	const nodeName = "h100-0"
	hw := e.hardware(nodeName)
	uuid := hw.NVML.Device(2).UUID
	e.pinnedGPU("trainer", uuid)
	pod := e.waitRunning("default", "trainer")
	claim := e.podClaim(pod, "gpu")
	h := e.waitGPUHealth("default", "trainer", corev1.ResourceHealthStatusHealthy, "")
	if !strings.Contains(string(h.ResourceID), "gpu-2") {
		t.Errorf("resource ID %q does not name gpu-2", h.ResourceID)
	}

	hw.NVML.InjectXID(2, 48) // double-bit ECC error reported as XID
	e.waitGPUHealth("default", "trainer", corev1.ResourceHealthStatusUnhealthy, nvidia.TaintXID+"=48:NoSchedule")

	hw.NVML.SetLost(2, true)
	e.waitEvent("default", "trainer", "DeviceTaintManagerEviction")
	e.eventually(60*time.Second, "evicted pod gone and its claim released", func(ctx context.Context) (bool, error) {
		_, perr := e.client.CoreV1().Pods("default").Get(ctx, "trainer", metav1.GetOptions{})
		_, cerr := e.client.ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(cerr), nil
	})
	if left := e.nvidiaLeftovers(nodeName); len(left) != 0 {
		t.Errorf("after eviction the plugin still holds %v", left)
	}

	hw.NVML.SetLost(2, false)
	e.eventually(60*time.Second, "gpu-2 untainted", func(context.Context) (bool, error) {
		d, ok := e.devicesOf(nodeName, nvidia.DriverName, "gpu")["gpu-2"]
		return ok && len(d.Taints) == 0, nil
	})
	e.pinnedGPU("trainer-again", uuid)
	e.waitRunning("default", "trainer-again")
}

// TestDeviceTaintRuleOnStrataDevice: an administrator's DeviceTaintRule
// on one GPU evicts the pod using it (NoExecute) and keeps new claims
// off the GPU until the rule is deleted.
func TestDeviceTaintRuleOnStrataDevice(t *testing.T) {
	e := startCluster(t, oneH100Node)
	const nodeName = "h100-0"
	hw := e.hardware(nodeName)
	uuid := hw.NVML.Device(3).UUID
	e.pinnedGPU("job", uuid)
	e.waitRunning("default", "job")
	rule := &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-3-maintenance"},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(nvidia.DriverName), Pool: ptr.To(nodeName), Device: ptr.To("gpu-3")},
			Taint:          resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoExecute},
		},
	}
	if _, err := e.client.ResourceV1().DeviceTaintRules().Create(e.ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("default", "job", "DeviceTaintManagerEviction")
	e.eventually(60*time.Second, "evicted pod gone", func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods("default").Get(ctx, "job", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	e.pinnedGPU("job-again", uuid)
	e.waitUnschedulable("default", "job-again")
	if err := e.client.ResourceV1().DeviceTaintRules().Delete(e.ctx, rule.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning("default", "job-again")
}
