package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
)

// cpuBlocks is a cluster of blocks of CPU nodes under one spine.
func cpuBlocks(blocks, perBlock int) string {
	return fmt.Sprintf(`
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: cpu
  count: %d
  cpu: "16"
  memory: 64Gi
  labels:
    network.topology.nvidia.com/spine: spine-0
    network.topology.nvidia.com/block: block-{index/%d}
`, blocks*perBlock, perBlock)
}

// TestImpossibleGangDoesNotStarveOthers: a gang that can never fit (40
// whole-node members that must share a block of 32 nodes) is submitted
// first and keeps its explanation; a feasible gang and lone pods that
// arrive after it are all scheduled, and the impossible gang's members
// fail a round at a time on one plan (the others answer from it) instead
// of each planning over every node.
func TestImpossibleGangDoesNotStarveOthers(t *testing.T) {
	e := startCluster(t, cpuBlocks(2, 32))
	e.applyFile(examplesDir + "/gang/topology.yaml")
	start := time.Now()
	e.shapedGang("impossible", preferBlock("MustGather"), role{name: "worker", count: 40, cpu: "12"})
	e.waitGangMessage("impossible", "40 pods do not fit in any BlockLayer domain", 60*time.Second)

	e.shapedGang("feasible", preferBlock("MustGather"), role{name: "worker", count: 16, cpu: "12"})
	for i := 0; i < 10; i++ {
		e.createPod(testutil.MakePod(fmt.Sprintf("lone-%d", i)).Scheduler(config.ProfileName).Req("1", "1Gi").Obj())
	}
	e.waitGangRunning("feasible", 16)
	for i := 0; i < 10; i++ {
		e.waitRunning("default", fmt.Sprintf("lone-%d", i))
	}
	t.Logf("feasible gang and lone pods running %s after the impossible gang was submitted", time.Since(start).Round(time.Millisecond))
	if n := boundCount(e.gangPods("impossible")); n != 0 {
		t.Errorf("%d members of the impossible gang bound", n)
	}
	e.waitPodGroup("impossible", "impossible gang still explained", 30*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == gang.ReasonUnschedulable
	})
	var pending int
	e.eventually(10*time.Second, "members pending", func(ctx context.Context) (bool, error) {
		pending = 0
		for _, p := range e.gangPods("impossible") {
			if p.Status.Phase == corev1.PodPending {
				pending++
			}
		}
		return pending == 40, nil
	})
}
