package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/controlplane"
)

// TestOneSchedulerAllocatesStrataDevices: the cluster runs upstream
// kube-scheduler beside strata-scheduler, as every cluster does with the
// chart's defaults. Pods that name no scheduler and get Strata's devices
// through a claim template or the nvidia.com/gpu extended resource are
// given strata-scheduler and run; a pod without devices stays
// kube-scheduler's; a pod naming a third scheduler is refused, naming
// spec.schedulerName.
func TestOneSchedulerAllocatesStrataDevices(t *testing.T) {
	e := startSim(t, oneH100Node, sim.Config{ControlPlane: controlplane.Options{KubeScheduler: true}})

	e.createTemplate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Template("default", "one-gpu"))
	claimed := e.createPod(testutil.MakePod("claimed").ClaimTemplate("gpu", "one-gpu").Obj())
	legacy := testutil.MakePod("legacy").Obj()
	legacy.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	legacy = e.createPod(legacy)
	plain := e.createPod(testutil.MakePod("plain").Obj())
	for _, p := range []*corev1.Pod{claimed, legacy} {
		if p.Spec.SchedulerName != config.ProfileName {
			t.Errorf("pod %s with Strata devices got spec.schedulerName %q, want %s", p.Name, p.Spec.SchedulerName, config.ProfileName)
		}
	}
	if plain.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("a pod without devices got spec.schedulerName %q, want kube-scheduler's", plain.Spec.SchedulerName)
	}
	e.waitRunning("default", "claimed")
	e.waitRunning("default", "legacy")
	e.waitRunning("default", "plain")

	third := testutil.MakePod("third").Scheduler("volcano").ClaimTemplate("gpu", "one-gpu").Obj()
	_, err := e.client.CoreV1().Pods("default").Create(e.ctx, third, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `spec.schedulerName: "volcano" may not schedule this pod`) {
		t.Fatalf("a pod naming another scheduler with a Strata claim: %v, want refused naming spec.schedulerName", err)
	}
}

// TestKubeSchedulerCannotAllocateStrataDevices: with the routing webhook
// off (or bypassed), kube-scheduler does try to schedule a pod with a
// Strata claim; the single-allocator policy refuses its allocation, so
// the pod stays pending with the reason in its events, and no device is
// allocated behind strata-scheduler's back.
func TestKubeSchedulerCannotAllocateStrataDevices(t *testing.T) {
	e := startSim(t, oneH100Node, sim.Config{
		ControlPlane: controlplane.Options{KubeScheduler: true},
		ChartValues:  map[string]any{"controller": map[string]any{"webhook": map[string]any{"routePods": map[string]any{"enabled": false}}}},
	})
	e.createTemplate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Template("default", "one-gpu"))
	pod := e.createPod(testutil.MakePod("unrouted").ClaimTemplate("gpu", "one-gpu").Obj())
	if pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Fatalf("routing is off, yet the pod got %q", pod.Spec.SchedulerName)
	}
	// kube-scheduler's first attempts may fail for other reasons (the
	// claim not made yet); its PreBind is the one the policy refuses.
	var msg string
	e.eventually(2*time.Minute, "kube-scheduler's allocation refused", func(ctx context.Context) (bool, error) {
		events, err := e.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling,involvedObject.name=unrouted"})
		if err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			if strings.Contains(ev.Message, "strata-single-allocator") {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(msg, "status.allocation: devices of the *.strata.sh drivers are allocated by strata-scheduler only, not by system:kube-scheduler") {
		t.Errorf("kube-scheduler's failure says %q, want the policy's reason", msg)
	}
	cur, err := e.client.CoreV1().Pods("default").Get(e.ctx, "unrouted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Spec.NodeName != "" {
		t.Errorf("the pod was bound to %s", cur.Spec.NodeName)
	}
	claims, err := e.client.ResourceV1().ResourceClaims("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.Status.Allocation != nil {
			t.Errorf("claim %s is allocated: %+v", c.Name, c.Status.Allocation.Devices.Results)
		}
	}
}
