package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/sim/controlplane"
)

const scoringCluster = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
name: scoring
nodeGroups:
- name: gpu
  count: 2
  cpu: "64"
  memory: 512Gi
  hardware: nvidia-dgx-h100
- name: cpu
  count: 2
  cpu: "64"
  memory: 512Gi
`

// TestKoordinatorScoring runs strata-scheduler with Koordinator's own
// NodeResourcesFitPlus / ScarceResourceAvoidance configuration, unchanged,
// on two DGX H100 nodes and two CPU nodes: pods that claim GPUs through
// DRA are packed onto one GPU node, and pods that need no GPU stay on the
// CPU nodes while those have room.
func TestKoordinatorScoring(t *testing.T) {
	cfg, err := os.ReadFile(examplesDir + "/scoring/koordinator-scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := startClusterWith(t, scoringCluster, controlplane.Options{SchedulerConfig: cfg})
	const scheduler = "koord-scheduler"

	t.Run("gpu-pods-packed", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.createTemplate(testutil.MakeClaimSpec().Request("gpu", "nvidia-gpu.strata.sh", 1).Template("default", "one-gpu"))
		// One at a time, so each pod sees the ones before it.
		nodes := map[string]int{}
		for i := 0; i < 5; i++ {
			name := fmt.Sprintf("gpu-pod-%d", i)
			e.createPod(testutil.MakePod(name).Scheduler(scheduler).ClaimTemplate("gpu", "one-gpu").Obj())
			p := e.waitRunning("default", name)
			nodes[p.Spec.NodeName]++
		}
		if len(nodes) != 1 {
			t.Errorf("GPU pods spread over %v, want all five packed on one GPU node", nodes)
		}
		for n := range nodes {
			if !strings.HasPrefix(n, "gpu-") {
				t.Errorf("GPU pods on %s", n)
			}
		}
	})

	t.Run("cpu-pods-off-gpu-nodes", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		// Each CPU node holds three: six stay off the GPU nodes; the
		// seventh finds room only on a GPU node, and gets it.
		for i := 0; i < 7; i++ {
			name := fmt.Sprintf("cpu-pod-%d", i)
			p := testutil.MakePod(name).Scheduler(scheduler).Obj()
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20"), corev1.ResourceMemory: resource.MustParse("8Gi")}
			e.createPod(p)
			got := e.waitRunning("default", name)
			onGPU := strings.HasPrefix(got.Spec.NodeName, "gpu-")
			if i < 6 && onGPU {
				t.Errorf("%s (the %d-th) on %s while a CPU node had room", name, i+1, got.Spec.NodeName)
			}
			if i == 6 && !onGPU {
				t.Errorf("%s on %s, want a GPU node once the CPU nodes are full", name, got.Spec.NodeName)
			}
		}
	})
}
