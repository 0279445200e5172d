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

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/controlplane"
)

// TestTwoSchedulerStream: the install with both of its guards off (no
// routing webhook, no single-allocator policy), so that kube-scheduler
// and strata-scheduler really do allocate from the same GPUs, each blind
// to what the other holds in memory: plain pods through kube-scheduler,
// pods and gangs (which wait in Permit for their members) through
// strata-scheduler, deleted at random, with a fault every 20 s (a plugin
// restarted, strata-scheduler restarted, a GPU falling off the bus and
// coming back). All the while the claims each node has prepared must fit
// its GPUs: the allocations may collide, the node must refuse the second.
// At the end nothing may be left prepared. STRATA_TWO_SCHEDULER_STREAM
// sets the length in seconds (default 60).
func TestTwoSchedulerStream(t *testing.T) {
	length := 60 * time.Second
	if v, err := strconv.Atoi(os.Getenv("STRATA_TWO_SCHEDULER_STREAM")); err == nil {
		length = time.Duration(v) * time.Second
	}
	e := startSim(t, streamCluster, sim.Config{
		ControlPlane: controlplane.Options{KubeScheduler: true},
		ChartValues: map[string]any{
			"policies":   map[string]any{"singleAllocator": map[string]any{"enabled": false}},
			"controller": map[string]any{"webhook": map[string]any{"routePods": map[string]any{"enabled": false}}},
		},
	})
	nodes := []string{"h100-0", "h100-1", "a100-0"}
	layout := e.streamLayout(nodes)
	whole := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1)
	e.createTemplate(whole.Template("default", "t-whole"))
	e.createTemplate(testutil.MakeClaimSpec().Request("mig", "nvidia-mig.strata.sh", 1,
		`device.attributes["nvidia.strata.sh"].profile in ["1g.10gb", "1g.5gb", "2g.20gb", "2g.10gb"]`).Template("default", "t-mig"))
	share := testutil.MakeClaimSpec().Request("share", "nvidia-shared.strata.sh", 1)
	share.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		"cores": resource.MustParse("40"), "memory": resource.MustParse("30Gi"),
	}}
	e.createTemplate(share.Template("default", "t-share"))
	templates := []struct{ name, entry string }{{"t-whole", "gpu"}, {"t-whole", "gpu"}, {"t-mig", "mig"}, {"t-share", "share"}}

	rng := rand.New(rand.NewPCG(38, 2))
	var live []string
	stats := map[string]int{}
	start := time.Now()
	nextFault, nextCheck := start.Add(20*time.Second), start
	faults := []string{"plugin", "scheduler", "gpu"}
	var lostGPU func()
	for seq := 0; time.Since(start) < length; seq++ {
		switch {
		case len(live) > 0 && (len(live) >= 60 || rng.IntN(10) < 3):
			i := rng.IntN(len(live))
			_ = e.client.CoreV1().Pods("default").Delete(e.ctx, live[i], metav1.DeleteOptions{})
			live = append(live[:i], live[i+1:]...)
		case rng.IntN(8) == 0:
			// A strata-scheduler gang of 2-3 whole GPUs: its first members
			// wait in Permit, holding their GPUs in memory only.
			name := fmt.Sprintf("gang-%d", seq)
			size := 2 + rng.IntN(2)
			pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: schedulingv1alpha1.PodGroupSpec{MinMember: int32(size)}}
			if err := e.crClient().Create(e.ctx, pg); err != nil {
				t.Fatal(err)
			}
			for m := 0; m < size; m++ {
				p := fmt.Sprintf("%s-%d", name, m)
				e.createPod(testutil.MakePod(p).Scheduler(config.ProfileName).Label(schedulingv1alpha1.PodGroupLabel, name).ClaimTemplate("gpu", "t-whole").Obj())
				live = append(live, p)
			}
			stats["gang pods"] += size
		default:
			tmpl := templates[rng.IntN(len(templates))]
			name := fmt.Sprintf("pod-%d", seq)
			w := testutil.MakePod(name).ClaimTemplate(tmpl.entry, tmpl.name)
			if rng.IntN(2) == 0 {
				w = w.Scheduler(config.ProfileName)
				stats["strata-scheduler pods"]++
			} else {
				stats["kube-scheduler pods"]++
			}
			e.createPod(w.Obj())
			live = append(live, name)
		}
		if now := time.Now(); now.After(nextFault) {
			fault := faults[stats["faults"]%len(faults)]
			stats["faults"]++
			node := nodes[rng.IntN(len(nodes))]
			switch fault {
			case "plugin":
				if err := e.node(node).RestartPlugin(e.ctx, nvidia.DriverName); err != nil {
					t.Fatalf("restart the plugin on %s: %v", node, err)
				}
			case "scheduler":
				if err := e.sim.ControlPlane.RestartScheduler(); err != nil {
					t.Fatal(err)
				}
			case "gpu":
				gpu := rng.IntN(8)
				e.hardware(node).NVML.SetLost(gpu, true)
				lostGPU = func() { e.hardware(node).NVML.SetLost(gpu, false) }
			}
			t.Logf("%s: fault %d: %s on %s", time.Since(start).Round(time.Second), stats["faults"], fault, node)
			nextFault = now.Add(20 * time.Second)
		}
		if lostGPU != nil && time.Now().After(nextFault.Add(-10*time.Second)) {
			lostGPU()
			lostGPU = nil
		}
		if time.Now().After(nextCheck) {
			stats["checks"]++
			stats["colliding allocations"] = max(stats["colliding allocations"], len(e.allocationOverCommits(layout)))
			for _, n := range nodes {
				for _, problem := range testutil.GPUOverCommits(layout, e.preparedClaims(n, nvidia.DriverName)) {
					t.Errorf("prepared on %s beyond its GPUs: %s", n, problem)
				}
			}
			nextCheck = time.Now().Add(2 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lostGPU != nil {
		lostGPU()
	}
	stats["pods started"] = e.countStarted()
	refusals, err := e.client.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "reason=" + plugin.OverCommitReason})
	if err != nil {
		t.Fatal(err)
	}
	stats["node refusals"] = len(refusals.Items)
	for _, name := range live {
		_ = e.client.CoreV1().Pods("default").Delete(e.ctx, name, metav1.DeleteOptions{})
	}
	e.eventually(3*time.Minute, "all pods and claims gone", func(ctx context.Context) (bool, error) {
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
	for _, n := range nodes {
		e.eventually(time.Minute, "nothing left prepared on "+n, func(context.Context) (bool, error) {
			return len(e.nvidiaLeftovers(n)) == 0, nil
		})
	}
	t.Logf("%s of stream: %v", length, stats)
	if stats["pods started"] < 20 {
		t.Errorf("only %d pods started; the stream did not exercise prepare", stats["pods started"])
	}
}
