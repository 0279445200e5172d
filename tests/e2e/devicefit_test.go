package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
)

// TestDeviceFit: on a DGX H100 whose eight GPUs are taken, a pod claiming
// a GPU is turned away by StrataDeviceFit, before the DRA allocator runs,
// with the claim and what it lacks in its PodScheduled condition. For a
// high-priority pod, preemption still weighs the node: with the victims
// removed StrataDeviceFit lets it through, and the DRA allocator gives the
// answer (kube-scheduler 1.37's DynamicResources cannot free a victim's
// devices in that simulation, so single pods do not preempt GPU holders;
// StrataGang's job-level preemption does, see preemption_test.go).
func TestDeviceFit(t *testing.T) {
	e := startCluster(t, oneH100Node)
	e.priorityClasses()
	e.createTemplate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Template("default", "one-gpu"))
	var holders []string
	for i := range 8 {
		name := fmt.Sprintf("holder-%d", i)
		pod := testutil.MakePod(name).Scheduler(config.ProfileName).ClaimTemplate("gpu", "one-gpu").Obj()
		pod.Spec.PriorityClassName = "low-priority"
		e.createPod(pod)
		holders = append(holders, name)
	}
	for _, name := range holders {
		e.waitRunning("default", name)
	}

	waiting := testutil.MakePod("waiting").Scheduler(config.ProfileName).ClaimTemplate("gpu", "one-gpu").Obj()
	waiting.Spec.PriorityClassName = "low-priority"
	e.createPod(waiting)
	cond := e.waitUnschedulable("default", "waiting")
	if !strings.Contains(cond.Message, "request gpu: 0 free matching devices on the node, needs 1") {
		t.Errorf("PodScheduled message %q does not say the node has no free GPU for the claim (StrataDeviceFit)", cond.Message)
	}

	urgent := testutil.MakePod("urgent").Scheduler(config.ProfileName).ClaimTemplate("gpu", "one-gpu").Obj()
	urgent.Spec.PriorityClassName = "high-priority"
	e.createPod(urgent)
	cond = e.waitUnschedulable("default", "urgent")
	_, preemption, ok := strings.Cut(cond.Message, "preemption:")
	if !ok || !strings.Contains(preemption, "cannot allocate all claims") || strings.Contains(preemption, "free matching devices") {
		t.Errorf("PodScheduled message %q: preemption should have reached the DRA allocator past StrataDeviceFit", cond.Message)
	}
	if left := e.survivors(holders...); len(left) != 8 {
		t.Errorf("GPU holders left: %v, want all eight", left)
	}
}
