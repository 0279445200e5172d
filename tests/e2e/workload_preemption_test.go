package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim/controlplane"
)

const twoWholeH100Nodes = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: h100
  count: 2
  hardware: nvidia-dgx-h100
`

// workloadAPI serves the upstream workload API (scheduling.k8s.io/v1beta1
// PodGroups) with its gate on.
var workloadAPI = controlplane.Options{
	FeatureGates:  map[string]bool{"GenericWorkload": true},
	RuntimeConfig: []string{"scheduling.k8s.io/v1beta1=true"},
}

// upstreamGang creates an upstream PodGroup of n members of a priority
// class, scheduled by strata-scheduler, each asking for gpus GPUs
// through a ResourceClaimTemplate of the group's name (and 1 CPU), and
// returns the members' names.
func (e *env) upstreamGang(name string, n, gpus int, class string, mode *schedulingv1beta1.DisruptionMode) []string {
	return e.upstreamGangOf(name, n, gpus, "1", class, mode)
}

// upstreamGangOf is upstreamGang with each member's CPU request; gpus 0
// makes members that need no device.
func (e *env) upstreamGangOf(name string, n, gpus int, cpu, class string, mode *schedulingv1beta1.DisruptionMode) []string {
	e.t.Helper()
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:  schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(n)}},
			PriorityClassName: class,
			DisruptionMode:    mode,
		},
	}
	if _, err := e.client.SchedulingV1beta1().PodGroups("default").Create(e.ctx, pg, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create PodGroup %s: %v", name, err)
	}
	if gpus > 0 {
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, int64(gpus)).Template("default", name))
	}
	var names []string
	for i := 0; i < n; i++ {
		w := testutil.MakePod(fmt.Sprintf("%s-%d", name, i)).Scheduler(config.ProfileName).Req(cpu, "1Gi")
		if gpus > 0 {
			w = w.ClaimTemplate("gpus", name)
		}
		pod := w.Obj()
		pod.Spec.PriorityClassName = class
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
		names = append(names, e.createPod(pod).Name)
	}
	return names
}

// waitAllRunning waits for the named pods to run and returns them.
func (e *env) waitAllRunning(names []string) []*corev1.Pod {
	e.t.Helper()
	var out []*corev1.Pod
	for _, name := range names {
		out = append(out, e.waitRunning("default", name))
	}
	return out
}

// preemptedEvents returns the messages of the Preempted events on a
// PodGroup.
func (e *env) preemptedEvents(podGroup string) []string {
	e.t.Helper()
	events, err := e.client.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "reason=Preempted,involvedObject.name=" + podGroup})
	if err != nil {
		e.t.Fatalf("list events: %v", err)
	}
	var out []string
	for _, ev := range events.Items {
		out = append(out, ev.Message)
	}
	return out
}

// TestUpstreamGangPreemption: an upstream workload-API gang whose members
// need GPUs through a ResourceClaimTemplate, which kube-scheduler's own
// pod-group preemption cannot make room for (it frees no device), is
// preempted for by Strata's job-level preemption. Feature gates are
// process-wide, so the test runs itself again in a child process with
// the workload API on.
func TestUpstreamGangPreemption(t *testing.T) {
	if !inGatedChild(t) {
		return
	}
	t.Run("GPUHolders", testUpstreamGangPreemptsGPUHolders)
	t.Run("VictimGangEvictedWhole", testUpstreamVictimGangEvictedWhole)
	t.Run("CPUGangLeftToInTree", testUpstreamCPUGangLeftToInTree)
}

// A high-priority gang of two members of 4 GPUs, on the one 8-GPU node
// that two low-priority pods hold: both holders are evicted, by Strata
// (their DisruptionTarget names the gang) in one preemption, while a
// CPU-only pod that frees nothing the gang needs stays; both members are
// nominated to the node while the holders terminate, and then run with 4
// GPUs each.
func testUpstreamGangPreemptsGPUHolders(t *testing.T) {
	e := startClusterWith(t, oneH100Node, workloadAPI)
	e.priorityClasses()
	e.lowPod("cpu-only", "h100-0", "4")
	holders := []string{"gpu-holder-0", "gpu-holder-1"}
	for _, name := range holders {
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 4).Template("default", name))
		e.lowPod(name, "h100-0", "1", func(p *corev1.Pod) {
			p.Finalizers = []string{"test.strata.sh/hold"}
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(name)}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		})
	}
	members := e.upstreamGang("hp", 2, 4, "high-priority", nil)
	defer func() {
		if t.Failed() {
			t.Log(e.describePods("default", append(append([]string{"cpu-only"}, holders...), members...)...))
		}
	}()
	e.eventually(60*time.Second, "holders evicted and members nominated", func(ctx context.Context) (bool, error) {
		for _, name := range holders {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp == nil {
				return false, err
			}
		}
		for _, name := range members {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.NominatedNodeName != "h100-0" {
				return false, err
			}
		}
		return true, nil
	})
	for _, name := range holders {
		p, err := e.client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
				cond = &p.Status.Conditions[i]
			}
		}
		if cond == nil || cond.Reason != corev1.PodReasonPreemptionByScheduler || cond.Message != "StrataGang: preempted to make room for gang default/hp" {
			t.Errorf("%s: DisruptionTarget %+v, want StrataGang's naming gang default/hp", name, cond)
		}
	}
	e.releaseHolders(holders)
	for _, p := range e.waitAllRunning(members) {
		if n := len(e.claimResults(p, "gpus")); n != 4 {
			t.Errorf("%s holds %d GPUs, want 4", p.Name, n)
		}
		if p.Spec.NodeName != "h100-0" {
			t.Errorf("%s runs on %q, want h100-0", p.Name, p.Spec.NodeName)
		}
	}
	if got := e.survivors(append([]string{"cpu-only"}, holders...)...); len(got) != 1 || got[0] != "cpu-only" {
		t.Errorf("survivors %v, want only the CPU-only pod", got)
	}
	// One decision evicted both holders; none followed it.
	e.eventually(30*time.Second, "Preempted event on the PodGroup", func(context.Context) (bool, error) {
		return len(e.preemptedEvents("hp")) > 0, nil
	})
	if got := e.preemptedEvents("hp"); len(got) != 1 || !strings.Contains(got[0], "evicting 2 jobs, 2 pods, 8 GPUs") {
		t.Errorf("Preempted events %q, want one evicting the 2 holders", got)
	}
}

// A low-priority upstream gang with disruptionMode All holds both nodes,
// one 8-GPU member on each. A high-priority gang of two 4-GPU members
// needs one node's GPUs: evicting one member would make the room, but
// the low gang is disrupted as a whole, so both its members go.
func testUpstreamVictimGangEvictedWhole(t *testing.T) {
	e := startClusterWith(t, twoWholeH100Nodes, workloadAPI)
	e.priorityClasses()
	low := e.upstreamGang("low-job", 2, 8, "low-priority", &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}})
	nodes := map[string]bool{}
	for _, p := range e.waitAllRunning(low) {
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != 2 {
		t.Fatalf("low gang on nodes %v, want one member on each node", nodes)
	}
	members := e.upstreamGang("hp", 2, 4, "high-priority", nil)
	defer func() {
		if t.Failed() {
			t.Log(e.describePods("default", append(low, members...)...))
		}
	}()
	var on string
	for _, p := range e.waitAllRunning(members) {
		if n := len(e.claimResults(p, "gpus")); n != 4 {
			t.Errorf("%s holds %d GPUs, want 4", p.Name, n)
		}
		if on != "" && p.Spec.NodeName != on {
			t.Errorf("members on %s and %s, want one node (one was enough)", on, p.Spec.NodeName)
		}
		on = p.Spec.NodeName
	}
	if got := e.survivors(low...); len(got) != 0 {
		t.Errorf("low gang members left %v, want none: a gang with disruptionMode All is evicted whole", got)
	}
	if got := e.preemptedEvents("hp"); len(got) != 1 || !strings.Contains(got[0], "gang default/low-job") || !strings.Contains(got[0], "evicting 1 jobs, 2 pods") {
		t.Errorf("Preempted events %q, want one evicting gang default/low-job as one job of 2 pods", got)
	}
}

// A high-priority gang of CPU-only members is kube-scheduler's own
// pod-group preemption's to preempt for: StrataGang steps aside, the
// in-tree preemption evicts (its DisruptionTarget, not StrataGang's), and
// the gang runs. Strata makes no preemption of its own for it.
func testUpstreamCPUGangLeftToInTree(t *testing.T) {
	e := startClusterWith(t, cpuNodes(1), workloadAPI)
	e.priorityClasses()
	lows := []string{"low-a", "low-b"}
	for _, name := range lows {
		e.lowPod(name, "cpu-0", "6", func(p *corev1.Pod) { p.Finalizers = []string{"test.strata.sh/hold"} })
	}
	// Two members of 5 CPUs; 4 of the node's 16 are free.
	members := e.upstreamGangOf("cpu-gang", 2, 0, "5", "high-priority", nil)
	defer func() {
		if t.Failed() {
			t.Log(e.describePods("default", append(lows, members...)...))
		}
	}()
	var victims []string
	e.eventually(60*time.Second, "a low-priority pod evicted", func(ctx context.Context) (bool, error) {
		victims = nil
		for _, name := range lows {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.DeletionTimestamp != nil {
				victims = append(victims, name)
			}
		}
		return len(victims) > 0, nil
	})
	for _, name := range victims {
		p, err := e.client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && (strings.HasPrefix(c.Message, "StrataGang:") || !strings.Contains(c.Message, "preempting to accommodate a higher priority")) {
				t.Errorf("%s: DisruptionTarget %q, want the in-tree preemption's", name, c.Message)
			}
		}
	}
	e.releaseHolders(lows)
	e.waitAllRunning(members)
	if got := e.preemptedEvents("cpu-gang"); len(got) != 0 {
		t.Errorf("StrataGang preempted for a gang that needs no device: %q", got)
	}
}
