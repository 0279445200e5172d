package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim"
)

func cpuNodes(n int) string {
	return fmt.Sprintf(`
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: cpu
  count: %d
  cpu: "16"
  memory: 128Gi
`, n)
}

// lowPod is a low-priority pod pinned to a node; it waits until it runs.
func (e *env) lowPod(name, node, cpu string, mutate ...func(*corev1.Pod)) {
	e.t.Helper()
	e.createLowPod(name, node, cpu, mutate...)
	e.waitRunning("default", name)
}

func (e *env) createLowPod(name, node, cpu string, mutate ...func(*corev1.Pod)) {
	e.t.Helper()
	pod := testutil.MakePod(name).Req(cpu, "8Gi").Obj()
	pod.Spec.PriorityClassName = "low-priority"
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	for _, m := range mutate {
		m(pod)
	}
	e.createPod(pod)
}

// hpGang creates a high-priority gang of CPU workers (gpus > 0 adds a
// claim for that many GPUs per worker).
func (e *env) hpGang(name string, members int, cpu string, gpus int, annotations map[string]string) {
	e.t.Helper()
	pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: schedulingv1alpha1.PodGroupSpec{MinMember: int32(members)}}
	if err := e.crClient().Create(e.ctx, pg); err != nil {
		e.t.Fatal(err)
	}
	if gpus > 0 {
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, int64(gpus)).Template("default", name))
	}
	for i := 0; i < members; i++ {
		w := testutil.MakePod(fmt.Sprintf("%s-%d", name, i)).Scheduler(config.ProfileName).Label(schedulingv1alpha1.PodGroupLabel, name).Req(cpu, "8Gi")
		if gpus > 0 {
			w = w.ClaimTemplate("gpus", name)
		}
		pod := w.Obj()
		pod.Spec.PriorityClassName = "high-priority"
		e.createPod(pod)
	}
}

// exists says whether a pod exists and is not being deleted: an evicted
// pod is deleted with a grace period and may still be terminating when
// the pod it made room for runs.
func (e *env) exists(name string) bool {
	p, err := e.client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		e.t.Fatalf("get pod %s: %v", name, err)
	}
	return p.DeletionTimestamp == nil
}

// survivors returns which of the named pods still exist and are not
// being deleted, sorted.
func (e *env) survivors(names ...string) []string {
	var out []string
	for _, n := range names {
		if e.exists(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func (e *env) priorityClasses() {
	e.t.Helper()
	e.applyFile(examplesDir + "/preemption/priorityclasses.yaml")
}

// TestPreemptionSeedScenario: the seeds' example as shipped, run the way
// a user runs it: strata-sim with the high-priority job as a later step.
// Each node has 4 CPUs free and each worker needs 10: one low-priority pod
// per node is evicted, no more, both workers run, and the report says
// what was evicted for the gang.
func TestPreemptionSeedScenario(t *testing.T) {
	const dir = examplesDir + "/preemption"
	r := runSim(t, sim.RunOptions{
		ClusterFile: dir + "/cluster.yaml",
		Manifests:   []string{dir + "/priorityclasses.yaml", dir + "/low-priority-pods.yaml"},
		Then:        []string{dir + "/hp-training-job.yaml"},
	})
	workers, lows := map[string]string{}, map[string]int{}
	for _, p := range r.Pods {
		switch {
		case strings.HasPrefix(p.Name, "hp-training-job-worker-") && p.Phase == "Running":
			workers[p.Name] = p.Node
		case strings.HasPrefix(p.Name, "low-priority-"):
			lows[p.Node]++
		}
	}
	if len(workers) != 2 || workers["hp-training-job-worker-0"] == workers["hp-training-job-worker-1"] {
		t.Errorf("workers running on %v, want one on each node", workers)
	}
	if lows["cpu-0"] != 1 || lows["cpu-1"] != 1 {
		t.Errorf("low-priority pods left per node %v, want exactly one evicted per node", lows)
	}
	if len(r.Gangs) != 1 || !strings.Contains(r.Gangs[0].Preempted, "evicting 2 jobs") {
		t.Errorf("report gangs %+v, want the preemption of 2 jobs", r.Gangs)
	}
}

// TestPreemptionEvictsNothingWhenHopeless: a gang that would not fit even
// with every lower-priority pod gone evicts nothing.
func TestPreemptionEvictsNothingWhenHopeless(t *testing.T) {
	e := startCluster(t, cpuNodes(2))
	e.priorityClasses()
	e.lowPod("low-a", "cpu-0", "6")
	e.lowPod("low-b", "cpu-1", "6")
	e.hpGang("too-big", 3, "10", 0, nil) // three 10-CPU workers, two 16-CPU nodes
	// Written by the attempt that decided: nothing of it can follow.
	e.waitGangMessage("too-big", "would not make room either, so nothing was evicted", 30*time.Second)
	if left := e.survivors("low-a", "low-b"); len(left) != 2 {
		t.Errorf("pods evicted for a gang that cannot fit: left %v", left)
	}
}

// TestVictimGangEvictedWhole: the cheapest room is on the node of one
// member of a low-priority gang; the whole gang goes (including its member
// elsewhere), the lone pod stays.
func TestVictimGangEvictedWhole(t *testing.T) {
	e := startCluster(t, cpuNodes(2))
	e.priorityClasses()
	e.lowPod("lone", "cpu-1", "7")
	pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "low-job", Namespace: "default"}, Spec: schedulingv1alpha1.PodGroupSpec{MinMember: 2}}
	if err := e.crClient().Create(e.ctx, pg); err != nil {
		t.Fatal(err)
	}
	// Two 9-CPU members: one per node.
	for i := 0; i < 2; i++ {
		pod := testutil.MakePod(fmt.Sprintf("low-job-%d", i)).Scheduler(config.ProfileName).Label(schedulingv1alpha1.PodGroupLabel, "low-job").Req("9", "8Gi").Obj()
		pod.Spec.PriorityClassName = "low-priority"
		e.createPod(pod)
	}
	e.waitGangRunning("low-job", 2)
	// One worker of 12 CPUs: cpu-0 after evicting the gang (one job), or
	// cpu-1 after evicting the gang and the lone pod (two jobs).
	e.hpGang("hp", 1, "12", 0, nil)
	pods := e.waitGangRunning("hp", 1)
	if got := e.survivors("low-job-0", "low-job-1", "lone"); len(got) != 1 || got[0] != "lone" {
		t.Errorf("survivors %v, want only the lone pod: the gang goes whole", got)
	}
	if pods[0].Spec.NodeName != "cpu-0" {
		t.Errorf("worker on %s, want cpu-0", pods[0].Spec.NodeName)
	}
}

// TestPreemptionSparesPDBProtectedPod: two equal victims, one under a
// PodDisruptionBudget: the other one goes.
func TestPreemptionSparesPDBProtectedPod(t *testing.T) {
	e := startCluster(t, cpuNodes(2))
	e.priorityClasses()
	// The budget comes first: the scheduler's informer has it long before
	// the gang arrives, and a budget whose status is not computed yet
	// allows no disruption either.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	if _, err := e.client.PolicyV1().PodDisruptionBudgets("default").Create(e.ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.lowPod("protected", "cpu-0", "10", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "db"} })
	e.lowPod("unprotected", "cpu-1", "10")
	// The disruption controller computes the budget: the one pod it
	// covers may not go.
	e.eventually(30*time.Second, "PDB status observed", func(ctx context.Context) (bool, error) {
		got, err := e.client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1 && got.Status.DisruptionsAllowed == 0, nil
	})
	e.hpGang("hp", 1, "12", 0, nil)
	e.waitGangRunning("hp", 1)
	if got := e.survivors("protected", "unprotected"); len(got) != 1 || got[0] != "protected" {
		t.Errorf("survivors %v, want the PDB-protected pod", got)
	}
}

// TestGPUGangPreemptsGPUHolders: a gang asking for GPUs evicts the pods
// whose claims hold the GPUs, never a CPU-only pod that frees nothing it
// needs.
func TestGPUGangPreemptsGPUHolders(t *testing.T) {
	e := startCluster(t, oneH100Node)
	e.priorityClasses()
	e.lowPod("cpu-only", "h100-0", "4")
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("gpu-holder-%d", i)
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 4).Template("default", name))
		e.lowPod(name, "h100-0", "1", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(name)}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		})
	}
	e.hpGang("hp", 2, "2", 4, nil)
	pods := e.waitGangRunning("hp", 2)
	if got := e.survivors("cpu-only", "gpu-holder-0", "gpu-holder-1"); len(got) != 1 || got[0] != "cpu-only" {
		t.Errorf("survivors %v, want only the CPU-only pod", got)
	}
	for _, p := range pods {
		if n := len(e.claimResults(&p, "gpus")); n != 4 {
			t.Errorf("%s got %d GPUs", p.Name, n)
		}
	}
}

// TestMustGatherGangPreemptsInsideOneBlock: every node is full; a
// MustGather gang for one block evicts only the pods of one block.
func TestMustGatherGangPreemptsInsideOneBlock(t *testing.T) {
	e := startCluster(t, twoBlocks(2))
	e.applyFile(examplesDir + "/gang/topology.yaml")
	e.priorityClasses()
	for _, node := range []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"} {
		name := "low-" + node
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 8).Template("default", name))
		e.lowPod(name, node, "1", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(name)}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		})
	}
	e.hpGang("hp", 2, "2", 8, preferBlock("MustGather"))
	pods := e.waitGangRunning("hp", 2)
	blocks := e.blocksOf(pods)
	left := e.survivors("low-gpu-0", "low-gpu-1", "low-gpu-2", "low-gpu-3")
	if len(blocks) != 1 || len(left) != 2 {
		t.Fatalf("gang in blocks %v, low pods left %v: want one block and two survivors", blocks, left)
	}
	for _, name := range left {
		node := strings.TrimPrefix(name, "low-")
		n, _ := e.client.CoreV1().Nodes().Get(e.ctx, node, metav1.GetOptions{})
		if n.Labels[blockLabel] == blocks[0] {
			t.Errorf("a pod in the gang's block %s survived while one outside went", blocks[0])
		}
	}
}

// TestNominatedRoomIsNotStolen: while the victims terminate, a
// lower-priority pod created meanwhile must not take the room that was
// freed for the gang.
func TestNominatedRoomIsNotStolen(t *testing.T) {
	e := startCluster(t, cpuNodes(2))
	e.priorityClasses()
	const finalizer = "test.strata.sh/hold"
	for _, node := range []string{"cpu-0", "cpu-1"} {
		e.lowPod("victim-"+node, node, "12", func(p *corev1.Pod) { p.Finalizers = []string{finalizer} })
	}
	e.hpGang("hp", 2, "10", 0, nil)
	// Both victims get a deletion timestamp; the finalizer keeps them.
	e.eventually(30*time.Second, "victims terminating", func(ctx context.Context) (bool, error) {
		for _, node := range []string{"cpu-0", "cpu-1"} {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, "victim-"+node, metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp == nil {
				return false, err
			}
		}
		return true, nil
	})
	// What a user sees while they terminate: the victims say why, and
	// every member carries the node freed for it.
	for _, node := range []string{"cpu-0", "cpu-1"} {
		p, err := e.client.CoreV1().Pods("default").Get(e.ctx, "victim-"+node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
				cond = &p.Status.Conditions[i]
			}
		}
		if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != corev1.PodReasonPreemptionByScheduler || !strings.Contains(cond.Message, "default/hp") {
			t.Errorf("victim-%s DisruptionTarget condition %+v, want True/%s naming the gang", node, cond, corev1.PodReasonPreemptionByScheduler)
		}
	}
	e.eventually(30*time.Second, "members nominated to both nodes", func(ctx context.Context) (bool, error) {
		nominated := map[string]bool{}
		for i := 0; i < 2; i++ {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("hp-%d", i), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			nominated[p.Status.NominatedNodeName] = true
		}
		return nominated["cpu-0"] && nominated["cpu-1"], nil
	})
	intruder := testutil.MakePod("intruder").Req("10", "8Gi").Obj()
	intruder.Spec.PriorityClassName = "low-priority"
	e.createPod(intruder)
	for _, node := range []string{"cpu-0", "cpu-1"} {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := e.client.CoreV1().Pods("default").Patch(e.ctx, "victim-"+node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitGangRunning("hp", 2)
	p, err := e.client.CoreV1().Pods("default").Get(e.ctx, "intruder", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Errorf("lower-priority intruder took room on %s", p.Spec.NodeName)
	}
}

// TestUnusableRoomClearsNominations: the room freed for a gang is taken
// by a pod of equal priority bound straight to the node before the gang
// gets there. The gang then no longer fits: its nominations are cleared,
// the PodGroup says so, and no second round of evictions follows.
func TestUnusableRoomClearsNominations(t *testing.T) {
	e := startCluster(t, cpuNodes(3))
	e.priorityClasses()
	const finalizer = "test.strata.sh/hold"
	lows := []string{"low-cpu-0", "low-cpu-1", "low-cpu-2"}
	for i, name := range lows {
		e.lowPod(name, fmt.Sprintf("cpu-%d", i), "12", func(p *corev1.Pod) { p.Finalizers = []string{finalizer} })
	}
	e.hpGang("hp", 2, "10", 0, nil)
	var target string
	e.eventually(30*time.Second, "hp-0 nominated", func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods("default").Get(ctx, "hp-0", metav1.GetOptions{})
		target = p.Status.NominatedNodeName
		return target != "", err
	})
	// A pod bound by name takes the room on hp-0's node; equal priority,
	// so it is no victim either.
	squatter := testutil.MakePod("squatter").Req("10", "8Gi").Obj()
	squatter.Spec.NodeName = target
	squatter.Spec.PriorityClassName = "high-priority"
	e.createPod(squatter)
	e.waitRunning("default", "squatter")
	for _, name := range lows {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := e.client.CoreV1().Pods("default").Patch(e.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The message is written by the attempt that decided to evict
	// nothing more: after it, no eviction of that attempt can follow.
	e.waitGangMessage("hp", "the room an earlier preemption made could not be used", 60*time.Second)
	survivors := e.survivors(lows...)
	if len(survivors) != 1 {
		t.Errorf("low-priority pods left %v, want exactly the one the first round spared", survivors)
	}
	for i := 0; i < 2; i++ {
		p, err := e.client.CoreV1().Pods("default").Get(e.ctx, fmt.Sprintf("hp-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" || p.Status.NominatedNodeName != "" {
			t.Errorf("hp-%d: node %q, nominated %q; want neither", i, p.Spec.NodeName, p.Status.NominatedNodeName)
		}
	}
}

// gpuGangNominatedOverHolders fills the one H100 node with two
// low-priority pods of 4 GPUs each, held back from terminating by a
// finalizer, and creates a high-priority gang of two 4-GPU members; it
// returns once both members are nominated to the node.
func (e *env) gpuGangNominatedOverHolders() []string {
	e.t.Helper()
	e.priorityClasses()
	holders := []string{"gpu-holder-0", "gpu-holder-1"}
	for _, name := range holders {
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 4).Template("default", name))
		e.lowPod(name, "h100-0", "1", func(p *corev1.Pod) {
			p.Finalizers = []string{"test.strata.sh/hold"}
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(name)}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		})
	}
	e.hpGang("hp", 2, "2", 4, nil)
	e.eventually(30*time.Second, "members nominated", func(ctx context.Context) (bool, error) {
		for i := 0; i < 2; i++ {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("hp-%d", i), metav1.GetOptions{})
			if err != nil || p.Status.NominatedNodeName != "h100-0" {
				return false, err
			}
		}
		return true, nil
	})
	return holders
}

// lowGPUIntruder creates a low-priority pod asking for 4 GPUs.
func (e *env) lowGPUIntruder() {
	e.t.Helper()
	e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 4).Template("default", "intruder"))
	intruder := testutil.MakePod("intruder").ClaimTemplate("gpus", "intruder").Obj()
	intruder.Spec.PriorityClassName = "low-priority"
	e.createPod(intruder)
}

// releaseHolders lets the held pods terminate.
func (e *env) releaseHolders(holders []string) {
	e.t.Helper()
	for _, name := range holders {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := e.client.CoreV1().Pods("default").Patch(e.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// checkGangGotTheGPUs checks that the gang runs with 4 GPUs per member
// and the intruder is still unbound.
func (e *env) checkGangGotTheGPUs() {
	e.t.Helper()
	for _, p := range e.waitGangRunning("hp", 2) {
		if n := len(e.claimResults(&p, "gpus")); n != 4 {
			e.t.Errorf("%s holds %d GPUs, want 4", p.Name, n)
		}
	}
	switch p, err := e.client.CoreV1().Pods("default").Get(e.ctx, "intruder", metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		// No intruder in this test.
	case err != nil:
		e.t.Errorf("get the intruder: %v", err)
	case p.Spec.NodeName != "":
		e.t.Errorf("intruder bound to %q; the GPUs were freed for the gang", p.Spec.NodeName)
	}
}

// TestNominatedGPUsAreNotStolen: the DRA case of the test above. The
// victims hold the node's GPUs; while they terminate, a lower-priority
// pod asking for GPUs arrives. kube-scheduler counts a nominated pod's
// CPU and memory for lower-priority pods, but not its claims: Strata keeps
// the intruder off the nominated node, and the gang gets all 8 GPUs.
func TestNominatedGPUsAreNotStolen(t *testing.T) {
	e := startCluster(t, oneH100Node)
	holders := e.gpuGangNominatedOverHolders()
	e.lowGPUIntruder()
	e.releaseHolders(holders)
	e.checkGangGotTheGPUs()
}

// TestNominationsSurviveSchedulerRestart: the scheduler restarts while
// the victims of a GPU gang's preemption terminate. The new scheduler
// rebuilds the nomination from the members' nominatedNodeName and the
// victims' DisruptionTarget: it does not evict again, a lower-priority
// pod asking for GPUs is kept off the room, and the gang gets it.
func TestNominationsSurviveSchedulerRestart(t *testing.T) {
	opts, plugin := watchGangPlugin()
	e := startClusterWith(t, oneH100Node, opts)
	holders := e.gpuGangNominatedOverHolders()
	old := plugin()
	if err := e.sim.ControlPlane.RestartScheduler(); err != nil {
		t.Fatal(err)
	}
	e.eventually(time.Minute, "the new scheduler's gang plugin rebuilds the nomination", func(context.Context) (bool, error) {
		p := plugin()
		return p != old && slices.Contains(p.Tracked()["nomination"], "default/hp"), nil
	})
	// The new scheduler says what the gang waits for: the rebuilt
	// nomination's victims, not a new round of evictions.
	e.waitGangMessage("hp", "waiting for 2 pods evicted for it to terminate", 60*time.Second)
	e.lowGPUIntruder()
	e.releaseHolders(holders)
	e.checkGangGotTheGPUs()
}

// refuseDeletes installs a ValidatingAdmissionPolicy that refuses to
// delete pods labelled guard=true, as a cluster's own policy or webhook
// may, and waits until the API server enforces it.
func (e *env) refuseDeletes() {
	e.t.Helper()
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-deletes"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"guard": "true"}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Delete},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}},
			},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "guarded pods are not deleted"}},
		},
	}
	e.denyWith(policy)
	// Policies take effect asynchronously: ask to delete a guarded probe
	// (a dry run) until it is refused.
	e.createPod(testutil.MakePod("guarded-probe").Scheduler("nobody").Label("guard", "true").Obj())
	e.eventually(30*time.Second, "delete policy enforced", func(ctx context.Context) (bool, error) {
		err := e.client.CoreV1().Pods("default").Delete(ctx, "guarded-probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "guarded pods are not deleted"), nil
	})
}

// TestRefusedEvictionGivesRoomUp: the gang needs both low-priority pods
// gone, and the cluster refuses to delete one of them. Nothing is
// evicted (the deletes go as a dry run first), the eviction is tried
// again, and then the room is given up: the PodGroup names the pod and
// the API server's answer, the gang's member is no longer nominated, and
// both pods still run.
func TestRefusedEvictionGivesRoomUp(t *testing.T) {
	e := startCluster(t, cpuNodes(1))
	e.priorityClasses()
	e.refuseDeletes()
	e.lowPod("guarded", "cpu-0", "6", func(p *corev1.Pod) { p.Labels = map[string]string{"guard": "true"} })
	e.lowPod("plain", "cpu-0", "6")
	e.hpGang("hp", 1, "12", 0, nil) // 4 CPUs free: room only with both gone
	// While tries are left the message says "could not evict ... trying
	// again at"; only the last names the tries.
	e.waitGangMessage("hp", "could not evict default/guarded (evict victim default/guarded:", 2*time.Minute)
	e.waitGangMessage("hp", "guarded pods are not deleted) after 3 tries;", time.Minute)
	if got := e.survivors("guarded", "plain"); len(got) != 2 {
		t.Errorf("pods left %v, want both: none is evicted while another's eviction is refused", got)
	}
	p, err := e.client.CoreV1().Pods("default").Get(e.ctx, "hp-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || p.Status.NominatedNodeName != "" {
		t.Errorf("hp-0: node %q, nominated %q; want neither", p.Spec.NodeName, p.Status.NominatedNodeName)
	}
}
