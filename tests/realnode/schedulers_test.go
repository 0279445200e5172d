package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/sim/controlplane"
)

// strataScheduler is the chart's strata-scheduler name and identity in
// the suite's installation.
const strataScheduler = "strata-scheduler"

var strataSchedulerID = controlplane.ServiceAccount("strata-system", strataScheduler)

// TestTwoSchedulersCannotShareAGPUOnRealNode: the suite's cluster runs
// kube-scheduler beside strata-scheduler, as clusters do. A pod that
// names no scheduler but claims a Strata GPU is routed to
// strata-scheduler and runs. A second allocation of the same whole GPU, as
// a scheduler whose view missed the first would write it, is refused by
// the API server when kube-scheduler writes it and, when strata-scheduler's
// own identity writes it, reaches the node: the plugin refuses to prepare
// it (an event on the claim, the kubelet's event on the pod), the first
// pod keeps its GPU, and the second pod runs once the first is gone.
func TestTwoSchedulersCannotShareAGPUOnRealNode(t *testing.T) {
	e, n := nvidiaNode(t)
	ctx := context.Background()
	claimTemplate(t, e, "whole-gpu", "nvidia-gpu.strata.sh", "")
	first := withClaim(shellPod("gpu-first", n.Name(), map[string]string{"main": gpuScript + "; echo ready; sleep 3600"}, "ubuntu:22.04"), "whole-gpu", "main")
	first = createPod(t, e, first)
	if first.Spec.SchedulerName != strataScheduler {
		t.Fatalf("a pod naming no scheduler with a Strata claim got spec.schedulerName %q, want %s", first.Spec.SchedulerName, strataScheduler)
	}
	seen := runningLog(t, e, first, "main", "ready", 3*time.Minute)
	gpus := gpuNode.FindAllStringSubmatch(seen, -1)
	if len(gpus) != 1 {
		t.Fatalf("the first pod sees GPUs %q, want one:\n%s", gpus, seen)
	}
	firstClaim := podClaim(t, e, first)
	result := firstClaim.Status.Allocation.Devices.Results[0]

	// The second claim, allocated the same GPU as another scheduler would.
	second := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "gpu-second", Namespace: metav1.NamespaceDefault},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "dev",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "nvidia-gpu.strata.sh"}}}}}}
	second, err := e.client.ResourceV1().ResourceClaims(second.Namespace).Create(ctx, second, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.ResourceV1().ResourceClaims(second.Namespace).Delete(ctx, second.Name, metav1.DeleteOptions{})
	})
	dup := result.DeepCopy()
	dup.Request = "dev"
	share := types.UID("0b5e0c4e-6c1a-4f39-9d55-2f1f3a0c0001")
	dup.ShareID = &share
	second.Status.Allocation = &resourcev1.AllocationResult{
		Devices:      resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{*dup}},
		NodeSelector: firstClaim.Status.Allocation.NodeSelector,
	}

	kube := clientAs(t, e, controlplane.Identity{User: controlplane.KubeSchedulerUser, Groups: []string{"system:authenticated"}})
	_, err = kube.ResourceV1().ResourceClaims(second.Namespace).UpdateStatus(ctx, second, metav1.UpdateOptions{})
	if err == nil || !strings.Contains(err.Error(), "status.allocation: devices of the *.strata.sh drivers are allocated by strata-scheduler only, not by system:kube-scheduler") {
		t.Fatalf("kube-scheduler allocating a Strata GPU: %v, want the single-allocator policy's refusal", err)
	}

	strata := clientAs(t, e, strataSchedulerID)
	if second, err = strata.ResourceV1().ResourceClaims(second.Namespace).UpdateStatus(ctx, second, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := shellPod("gpu-second", n.Name(), map[string]string{"main": gpuScript + "; echo ready; sleep 3600"}, "ubuntu:22.04")
	pod.Spec.NodeName = n.Name()
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: &second.Name}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
	pod = createPod(t, e, pod)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := strata.ResourceV1().ResourceClaims(second.Namespace).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		_, err = strata.ResourceV1().ResourceClaims(second.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	want := "refusing to over-commit device " + result.Device
	claimEvent := waitEvent(t, e, "ResourceClaim", second.Name, plugin.OverCommitReason, 2*time.Minute)
	if !strings.Contains(claimEvent, want) || !strings.Contains(claimEvent, firstClaim.Name) {
		t.Errorf("the claim's event says %q, want %q naming %s", claimEvent, want, firstClaim.Name)
	}
	podEvent := waitEvent(t, e, "Pod", pod.Name, "FailedPrepareDynamicResources", 2*time.Minute)
	if !strings.Contains(podEvent, want) {
		t.Errorf("the kubelet's event on the pod says %q, want %q", podEvent, want)
	}
	cur, err := e.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range cur.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			t.Errorf("the second pod's container started on a GPU prepared for another claim: %+v", cs.State)
		}
	}
	if again := runningLog(t, e, first, "main", "ready", time.Minute); again != seen {
		t.Errorf("the first pod's view changed:\n%s\nwas:\n%s", again, seen)
	}

	// Once the first pod is gone, the kubelet's retry prepares the GPU for
	// the second.
	if err := e.client.CoreV1().Pods(first.Namespace).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	log := runningLog(t, e, pod, "main", "ready", 3*time.Minute)
	if got := gpuNode.FindAllStringSubmatch(log, -1); len(got) != 1 || got[0][1] != gpus[0][1] {
		t.Errorf("the second pod sees GPUs %q, want GPU %s:\n%s", got, gpus[0][1], log)
	}
}

// podClaim returns the allocated claim made for a pod's one claim.
func podClaim(t *testing.T, e *env, p *corev1.Pod) *resourcev1.ResourceClaim {
	t.Helper()
	uid := podClaimUID(t, e, p)
	claims, err := e.client.ResourceV1().ResourceClaims(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		if string(claims.Items[i].UID) == uid && claims.Items[i].Status.Allocation != nil {
			return &claims.Items[i]
		}
	}
	t.Fatalf("pod %s has no allocated claim", p.Name)
	return nil
}

// clientAs is a client acting as id.
func clientAs(t *testing.T, e *env, id controlplane.Identity) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(id.Config(e.sim.ControlPlane.Config))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitEvent waits for an event with reason about the named object and
// returns its message.
func waitEvent(t *testing.T, e *env, kind, name, reason string, timeout time.Duration) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		events, err := e.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s %s: %v", reason, kind, name, fmt.Sprint(err))
	}
	return msg
}
