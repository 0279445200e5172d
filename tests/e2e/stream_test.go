package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim/node"
)

const streamCluster = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: h100
  count: 2
  hardware: nvidia-dgx-h100
  mig: dynamic
- name: a100
  count: 1
  hardware: nvidia-dgx-a100
  mig: dynamic
`

// TestMixedClaimStream creates and deletes claims of every kind (whole
// GPUs, NVLink pairs, MIG slices, GPU shares) at random, checking all the
// while that no GPU is handed out twice, and at the end that nothing is
// left prepared: no checkpoint entry, CDI spec, MIG instance or MPS
// daemon. STRATA_STREAM_CLAIMS sets the number of claims (default 2000).
func TestMixedClaimStream(t *testing.T) {
	total := 2000
	if v, err := strconv.Atoi(os.Getenv("STRATA_STREAM_CLAIMS")); err == nil {
		total = v
	}
	e := startCluster(t, streamCluster)
	nodes := []string{"h100-0", "h100-1", "a100-0"}
	layout := e.streamLayout(nodes)

	templates := []string{"s-whole", "s-pair", "s-mig", "s-share"}
	e.createTemplate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Template("default", "s-whole"))
	e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 2).MatchAttribute("accelerator.strata.sh/partition2", "gpus").Template("default", "s-pair"))
	e.createTemplate(testutil.MakeClaimSpec().Request("mig", "nvidia-mig.strata.sh", 1,
		`device.attributes["nvidia.strata.sh"].profile in ["1g.10gb", "1g.5gb", "2g.20gb", "2g.10gb"]`).Template("default", "s-mig"))
	share := testutil.MakeClaimSpec().Request("share", "nvidia-shared.strata.sh", 1)
	share.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		"cores": resource.MustParse("25"), "memory": resource.MustParse("8Gi"),
	}}
	e.createTemplate(share.Template("default", "s-share"))
	entries := map[string]string{"s-whole": "gpu", "s-pair": "gpus", "s-mig": "mig", "s-share": "share"}

	rng := rand.New(rand.NewPCG(42, uint64(total)))
	var live []string
	const maxLive = 40
	start := time.Now()
	for created := 0; created < total; {
		if len(live) > 0 && (len(live) >= maxLive || rng.IntN(10) < 4) {
			i := rng.IntN(len(live))
			name := live[i]
			live = append(live[:i], live[i+1:]...)
			if err := e.client.CoreV1().Pods("default").Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s: %v", name, err)
			}
		} else {
			tmpl := templates[rng.IntN(len(templates))]
			name := fmt.Sprintf("stream-%d", created)
			e.createPod(testutil.MakePod(name).Scheduler(config.ProfileName).ClaimTemplate(entries[tmpl], tmpl).Obj())
			live = append(live, name)
			created++
		}
		if created%100 == 0 {
			e.checkNoDoubleAllocation(layout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.checkNoDoubleAllocation(layout)
	ran := e.countStarted()
	for _, name := range live {
		if err := e.client.CoreV1().Pods("default").Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	e.eventually(2*time.Minute, "all pods and claims gone", func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		claims, err := e.client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, nil
	})
	t.Logf("%d claims in %v, %d pods started", total, time.Since(start).Round(time.Second), ran)
	if ran < total/4 {
		t.Errorf("only %d of %d pods ever started; the stream did not exercise prepare", ran, total)
	}
	events, err := e.client.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "reason=" + node.ReasonFailedPrepare})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		t.Errorf("prepare failed for %s: %s", ev.InvolvedObject.Name, ev.Message)
	}
	for _, n := range nodes {
		e.eventually(30*time.Second, "nothing left prepared on "+n, func(context.Context) (bool, error) {
			return len(e.nvidiaLeftovers(n)) == 0, nil
		})
	}
}

// countStarted counts pods the nodes reported as started.
func (e *env) countStarted() int {
	events, err := e.client.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "reason=" + node.ReasonStarted})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(events.Items)
}

// streamLayout waits until the nodes have published their NVIDIA
// devices and maps every one of them to where it sits on its GPU.
func (e *env) streamLayout(nodes []string) testutil.GPULayout {
	e.t.Helper()
	e.eventually(time.Minute, "all devices published", func(context.Context) (bool, error) {
		for _, n := range nodes {
			if len(e.devicesOf(n, nvidia.DriverName, "gpu")) != 8 {
				return false, nil
			}
		}
		return true, nil
	})
	published, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("list slices: %v", err)
	}
	layout := testutil.NVIDIALayout(published.Items, nvidia.DriverName)
	for name, p := range layout {
		// A MIG device without its memory slices would collide with nothing.
		if p.MIG && p.Size < 1 {
			e.t.Fatalf("MIG device %s has no placement size", name)
		}
	}
	return layout
}

// checkNoDoubleAllocation checks every allocated claim against the
// others: a whole GPU excludes everything else on it, MIG placements do
// not overlap, shares never exceed the GPU.
func (e *env) checkNoDoubleAllocation(layout testutil.GPULayout) {
	e.t.Helper()
	for _, problem := range e.allocationOverCommits(layout) {
		e.t.Error(problem)
	}
}

// allocationOverCommits lists how the claims the API server holds
// allocated over-commit a GPU of the layout.
func (e *env) allocationOverCommits(layout testutil.GPULayout) []string {
	e.t.Helper()
	claims, err := e.client.ResourceV1().ResourceClaims("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return testutil.GPUOverCommits(layout, claims.Items)
}
