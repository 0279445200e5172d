package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
	"github.com/strata-sh/strata/controller"
	"github.com/strata-sh/strata/internal/testutil"
	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/controlplane"
)

const blockLabel = "network.topology.nvidia.com/block"

// twoBlocks is the gang example's cluster: blocks of four DGX H100 nodes.
func twoBlocks(nodesPerBlock int) string {
	return fmt.Sprintf(`
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: gpu
  count: %d
  cpu: "224"
  memory: 2Ti
  hardware: nvidia-dgx-h100
  labels:
    network.topology.nvidia.com/spine: spine-0
    network.topology.nvidia.com/block: block-{index/%d}
`, 2*nodesPerBlock, nodesPerBlock)
}

func (e *env) crClient() client.Client {
	e.t.Helper()
	scheme, err := controller.Scheme()
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := rest.CopyConfig(e.sim.ControlPlane.Config)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// gang creates a PodGroup and its member pods, each claiming gpus GPUs.
func (e *env) gang(name string, members, minMember, gpus int, annotations map[string]string) {
	e.t.Helper()
	pg := &schedulingv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec:       schedulingv1alpha1.PodGroupSpec{MinMember: int32(minMember)},
	}
	if err := e.crClient().Create(e.ctx, pg); err != nil {
		e.t.Fatalf("create PodGroup %s: %v", name, err)
	}
	tmpl := name + "-gpus"
	if gpus > 0 {
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, int64(gpus)).Template("default", tmpl))
	}
	for i := 0; i < members; i++ {
		w := testutil.MakePod(fmt.Sprintf("%s-%d", name, i)).Scheduler(config.ProfileName).
			Label(schedulingv1alpha1.PodGroupLabel, name).Req("8", "32Gi")
		if gpus > 0 {
			w = w.ClaimTemplate("gpus", tmpl)
		}
		e.createPod(w.Obj())
	}
}

// gangPods returns the pods of a gang by name.
func (e *env) gangPods(name string) []corev1.Pod {
	e.t.Helper()
	pods, err := e.client.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: schedulingv1alpha1.PodGroupLabel + "=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	return pods.Items
}

// waitPodGroup waits until the PodGroup and its Scheduled condition (nil
// while it has none) satisfy ok.
func (e *env) waitPodGroup(name, what string, timeout time.Duration, ok func(*schedulingv1alpha1.PodGroup, *metav1.Condition) bool) {
	e.t.Helper()
	cr := e.crClient()
	e.eventually(timeout, what, func(ctx context.Context) (bool, error) {
		var pg schedulingv1alpha1.PodGroup
		if err := cr.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &pg); err != nil {
			// Not there yet: strata-controller creates the PodGroups of
			// gangs declared on pods.
			return false, client.IgnoreNotFound(err)
		}
		return ok(&pg, meta.FindStatusCondition(pg.Status.Conditions, schedulingv1alpha1.ConditionScheduled)), nil
	})
}

// waitGangMessage waits until the PodGroup's Scheduled condition says want.
// watchGangPlugin returns control plane options whose scheduler's gang
// plugin the returned function gives: the instance of the scheduler
// running last, a new one after each restart.
func watchGangPlugin() (controlplane.Options, func() *gang.Plugin) {
	var mu sync.Mutex
	var last *gang.Plugin
	registry := schedulerplugins.Registry()
	newGang := registry[gang.Name]
	registry[gang.Name] = func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		pl, err := newGang(ctx, obj, h)
		if err == nil {
			mu.Lock()
			last = pl.(*gang.Plugin)
			mu.Unlock()
		}
		return pl, err
	}
	return controlplane.Options{Plugins: registry}, func() *gang.Plugin {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

func (e *env) waitGangMessage(name, want string, timeout time.Duration) {
	e.t.Helper()
	last := "no Scheduled condition"
	defer func() {
		if e.t.Failed() {
			e.t.Logf("PodGroup %s last said: %s", name, last)
		}
	}()
	e.waitPodGroup(name, "PodGroup "+name+" says "+want, timeout, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		if c != nil {
			last = c.Message
		}
		return c != nil && strings.Contains(c.Message, want)
	})
}

func (e *env) waitGangRunning(name string, n int) []corev1.Pod {
	e.t.Helper()
	var pods []corev1.Pod
	// Two minutes: on a loaded machine the ResourceClaim controller has
	// been seen to take over a minute to create a gang's claims.
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		pods = e.gangPods(name)
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, nil
	})
	if err != nil {
		// What the scheduler last said, for a failure seen only now and then.
		names := make([]string, 0, len(pods))
		for _, p := range pods {
			names = append(names, p.Name)
		}
		var pg schedulingv1alpha1.PodGroup
		_ = e.crClient().Get(e.ctx, client.ObjectKey{Namespace: "default", Name: name}, &pg)
		e.t.Fatalf("gang %s running: %v\nPodGroup status: %+v\n%s\nothers:%s", name, err, pg.Status, e.describePods("default", names...), e.describeOthers("default", names))
	}
	return pods
}

// blocksOf returns the blocks a gang's pods run in.
func (e *env) blocksOf(pods []corev1.Pod) []string {
	e.t.Helper()
	seen := map[string]bool{}
	for _, p := range pods {
		n, err := e.client.CoreV1().Nodes().Get(e.ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		seen[n.Labels[blockLabel]] = true
	}
	var out []string
	for b := range seen {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

func boundCount(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// occupy fills n GPUs on each node of a block with one filler pod per node.
func (e *env) occupy(nodes []string, gpus int) {
	e.t.Helper()
	for _, node := range nodes {
		name := "filler-" + node
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, int64(gpus)).Template("default", name))
		pod := testutil.MakePod(name).Scheduler(config.ProfileName).ClaimTemplate("gpus", name).Obj()
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		e.createPod(pod)
		e.waitRunning("default", name)
	}
}

func preferBlock(strategy string) map[string]string {
	return map[string]string{"scheduling.strata.sh/network-topology-spec": fmt.Sprintf(`{"gatherStrategy":[{"layer":"BlockLayer","strategy":%q}]}`, strategy)}
}

// TestTrainingJobExampleLandsInOneBlock applies the seeds' training job
// (Koordinator annotation keys) and checks the topology status.
func TestTrainingJobExampleLandsInOneBlock(t *testing.T) {
	e := startCluster(t, twoBlocks(4))
	e.applyFile(examplesDir + "/gang/topology.yaml")
	e.applyFile(examplesDir + "/gang/training-job.yaml")
	pods := e.waitGangRunning("training-job", 8)
	if blocks := e.blocksOf(pods); len(blocks) != 1 {
		t.Errorf("training job spread over blocks %v although one block holds it", blocks)
	}
	e.waitPodGroup("training-job", "PodGroup scheduled and running", 30*time.Second, func(pg *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && pg.Status.Running == 8 && pg.Status.Phase == schedulingv1alpha1.PodGroupRunning
	})
	cr := e.crClient()
	e.eventually(30*time.Second, "topology status lists both blocks", func(ctx context.Context) (bool, error) {
		var topo topologyv1alpha1.ClusterNetworkTopology
		if err := cr.Get(ctx, client.ObjectKey{Name: "default"}, &topo); err != nil {
			return false, err
		}
		blocks := 0
		for _, d := range topo.Status.Domains {
			if d.Layer == "BlockLayer" && d.Nodes == 4 && d.Parent == "spine-0" {
				blocks++
			}
		}
		return blocks == 2 && topo.Status.UnplacedNodeCount == 0, nil
	})
}

// TestGangSpreadsOnlyWhenNoBlockFits: PreferGather spreads a gang that no
// block can hold; MustGather keeps it pending whole, explained.
func TestGangSpreadsOnlyWhenNoBlockFits(t *testing.T) {
	e := startCluster(t, twoBlocks(4))
	e.applyFile(examplesDir + "/gang/topology.yaml")
	// Half of every block's GPUs are taken: each block has 16 free.
	e.occupy([]string{"gpu-0", "gpu-1", "gpu-4", "gpu-5"}, 8)

	e.gang("must", 6, 6, 4, preferBlock("MustGather"))
	var msg string
	e.waitPodGroup("must", "MustGather gang explained", 2*time.Minute, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != gang.ReasonUnschedulable {
			return false
		}
		msg = c.Message
		return true
	})
	for _, want := range []string{"6 pods do not fit in any BlockLayer domain", "of 6 pods fit", "4×nvidia-gpu.strata.sh"} {
		if !strings.Contains(msg, want) {
			t.Errorf("PodGroup condition %q does not say %q", msg, want)
		}
	}
	// The condition is written after the placement failed: proof that the
	// scheduler tried and bound nothing.
	if n := boundCount(e.gangPods("must")); n != 0 {
		t.Fatalf("MustGather gang that fits no block bound %d pods", n)
	}

	// The same gang with PreferGather spreads over both blocks.
	e.gang("prefer", 6, 6, 4, preferBlock("PreferGather"))
	pods := e.waitGangRunning("prefer", 6)
	if blocks := e.blocksOf(pods); len(blocks) != 2 {
		t.Errorf("PreferGather gang in blocks %v, want both", blocks)
	}
}

// TestGangsRacingForOneBlock: two gangs that each need the only free
// block: one runs whole, the other waits whole, and gets the block when
// the first goes.
func TestGangsRacingForOneBlock(t *testing.T) {
	e := startCluster(t, twoBlocks(2))
	e.applyFile(examplesDir + "/gang/topology.yaml")
	e.occupy([]string{"gpu-2", "gpu-3"}, 8) // block-1 full
	e.gang("alpha", 4, 4, 4, preferBlock("MustGather"))
	e.gang("beta", 4, 4, 4, preferBlock("MustGather"))
	var winner, loser string
	e.eventually(60*time.Second, "one gang runs whole", func(context.Context) (bool, error) {
		for _, pair := range [][2]string{{"alpha", "beta"}, {"beta", "alpha"}} {
			running := 0
			for _, p := range e.gangPods(pair[0]) {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			if running == 4 {
				winner, loser = pair[0], pair[1]
				return true, nil
			}
		}
		return false, nil
	})
	// The loser's condition says the scheduler tried it after the winner
	// took the block.
	e.waitPodGroup(loser, "losing gang explained", 30*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Reason == gang.ReasonUnschedulable
	})
	if n := boundCount(e.gangPods(loser)); n != 0 {
		t.Fatalf("losing gang %s has %d pods bound; it must wait whole", loser, n)
	}
	for _, p := range e.gangPods(winner) {
		e.deletePod("default", p.Name)
	}
	e.waitGangRunning(loser, 4)
}

// TestGangGroupBindsOnlyWhenAllGangsFit: parameter servers and workers
// admitted together; while the workers cannot be placed, no parameter
// server binds.
func TestGangGroupBindsOnlyWhenAllGangsFit(t *testing.T) {
	e := startCluster(t, twoBlocks(2))
	e.occupy([]string{"gpu-0", "gpu-1"}, 8)
	group := map[string]string{"scheduling.strata.sh/groups": `["default/ps", "default/workers"]`}
	e.gang("ps", 2, 2, 0, group)
	e.gang("workers", 3, 3, 8, group) // three 8-GPU workers, two nodes free
	e.waitGangMessage("workers", "3 pods do not fit in the cluster: 2 of 3 pods fit", 2*time.Minute)
	if n := boundCount(e.gangPods("ps")) + boundCount(e.gangPods("workers")); n != 0 {
		t.Fatalf("%d pods of the group bound although the workers do not fit", n)
	}
	e.deletePod("default", "filler-gpu-0")
	e.waitGangRunning("workers", 3)
	e.waitGangRunning("ps", 2)
}

// TestGangNeedsFreeDevicesNotJustCPU: nodes with 7 free GPUs each cannot
// hold members that need 8, although CPU and memory fit.
func TestGangNeedsFreeDevicesNotJustCPU(t *testing.T) {
	e := startCluster(t, twoBlocks(2))
	e.occupy([]string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, 1)
	e.gang("big", 2, 2, 8, nil)
	e.waitGangMessage("big", "(DRA devices)", 2*time.Minute)
	// The member's own condition gives the reason once (kube-scheduler
	// joins PreFilter's and PostFilter's messages).
	e.eventually(2*time.Minute, "member big-0 says why", func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods("default").Get(ctx, "big-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				if n := strings.Count(c.Message, "do not fit"); n > 1 {
					return false, fmt.Errorf("reason given %d times: %s", n, c.Message)
				}
				return strings.Contains(c.Message, "do not fit"), nil
			}
		}
		return false, nil
	})
	if n := boundCount(e.gangPods("big")); n != 0 {
		t.Fatalf("%d members bound on nodes without 8 free GPUs", n)
	}
	e.deletePod("default", "filler-gpu-2")
	e.deletePod("default", "filler-gpu-3")
	pods := e.waitGangRunning("big", 2)
	for _, p := range pods {
		if p.Spec.NodeName != "gpu-2" && p.Spec.NodeName != "gpu-3" {
			t.Errorf("member on %s, which has only 7 free GPUs", p.Spec.NodeName)
		}
	}
}

// TestGangOfExtendedResourcePods: members that ask for nvidia.com/gpu: 8
// (the DeviceClass's extendedResourceName, as device-plugin and
// Koordinator users write them) are planned by devices on DRA-only nodes
// and bound together, each on a node of its own.
func TestGangOfExtendedResourcePods(t *testing.T) {
	e := startCluster(t, twoBlocks(2))
	e.gang("legacy", 0, 2, 0, nil)
	for i := 0; i < 2; i++ {
		pod := testutil.MakePod(fmt.Sprintf("legacy-%d", i)).Scheduler(config.ProfileName).
			Label(schedulingv1alpha1.PodGroupLabel, "legacy").Obj()
		gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
		pod.Spec.Containers[0].Resources.Requests, pod.Spec.Containers[0].Resources.Limits = gpus, gpus
		e.createPod(pod)
	}
	pods := e.waitGangRunning("legacy", 2)
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		t.Errorf("both 8-GPU members on %s", pods[0].Spec.NodeName)
	}
	for _, p := range pods {
		if ext := p.Status.ExtendedResourceClaimStatus; ext == nil {
			t.Errorf("%s has no claim for its nvidia.com/gpu", p.Name)
		}
	}
}

// TestIncompleteAndInvalidGangsSayWhy: a gang held back before scheduling
// (kube-scheduler shows nothing of that) says why where users look: a
// PodGroup short of minMember, one with a malformed annotation and a gang
// declared on pods alone with a malformed one, each in its PodGroup's
// Scheduled condition; once the last member arrives the gang schedules.
func TestIncompleteAndInvalidGangsSayWhy(t *testing.T) {
	// Admission refuses the malformed annotations below when it is
	// installed (TestAdmissionRefusesBadInput); the scheduler still
	// explains them for objects made without it (an install with the
	// webhook and the annotation policy off, or objects older than the
	// install).
	e := startSim(t, twoBlocks(2), sim.Config{ChartValues: map[string]any{
		"controller": map[string]any{"webhook": map[string]any{"enabled": false}},
		"policies":   map[string]any{"gangAnnotations": false},
	}})
	e.gang("short", 2, 3, 0, nil)
	e.waitPodGroup("short", "short gang explained", 30*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Reason == gang.ReasonWaitingForMembers && strings.Contains(c.Message, "has 2 of 3 pods; waiting for 1 more member")
	})

	e.gang("bad", 1, 1, 0, map[string]string{"scheduling.strata.sh/network-topology-spec": `{"gatherStrategy":[{"layer":"BlockLayer","strategy":"Gather"}]}`})
	e.waitPodGroup("bad", "malformed annotation explained", 30*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Reason == gang.ReasonInvalidGang && strings.Contains(c.Message, "scheduling.strata.sh/network-topology-spec: gatherStrategy[0].strategy")
	})

	lone := testutil.MakePod("lone").Scheduler(config.ProfileName).Obj()
	lone.Annotations = map[string]string{"gang.scheduling.koordinator.sh/name": "lone", "gang.scheduling.koordinator.sh/min-available": "two"}
	e.createPod(lone)
	e.waitPodGroup("lone", "malformed pod annotation explained on the gang's PodGroup", 30*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Reason == gang.ReasonInvalidGang && strings.Contains(c.Message, "gang.scheduling.koordinator.sh/min-available")
	})

	w := testutil.MakePod("short-2").Scheduler(config.ProfileName).Label(schedulingv1alpha1.PodGroupLabel, "short").Req("8", "32Gi")
	e.createPod(w.Obj())
	e.waitGangRunning("short", 3)
}

// TestAnnotationGangGetsAPodGroup: a gang declared on pod annotations
// alone (Koordinator's keys) shows what a PodGroup gang shows: strata-
// controller keeps a PodGroup for it, which says what the gang waits for,
// then its phase, counts and Scheduled condition, and goes with the last
// pod.
func TestAnnotationGangGetsAPodGroup(t *testing.T) {
	e := startCluster(t, twoBlocks(2))
	member := func(i int) {
		pod := testutil.MakePod(fmt.Sprintf("koord-%d", i)).Scheduler(config.ProfileName).Req("8", "32Gi").Obj()
		pod.Annotations = map[string]string{"gang.scheduling.koordinator.sh/name": "koord", "gang.scheduling.koordinator.sh/min-available": "3"}
		e.createPod(pod)
	}
	member(0)
	member(1)
	e.waitPodGroup("koord", "the annotated gang's PodGroup says it waits for a member", 30*time.Second, func(pg *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return pg.Labels[schedulingv1alpha1.FromPodAnnotationsLabel] == "true" && pg.Spec.MinMember == 3 &&
			c != nil && c.Reason == gang.ReasonWaitingForMembers && strings.Contains(c.Message, "has 2 of 3 pods; waiting for 1 more member")
	})
	member(2)
	e.waitPodGroup("koord", "the annotated gang running", 60*time.Second, func(pg *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return pg.Status.Phase == schedulingv1alpha1.PodGroupRunning && pg.Status.Running == 3 && c != nil && c.Status == metav1.ConditionTrue
	})
	for i := 0; i < 3; i++ {
		e.deletePod("default", fmt.Sprintf("koord-%d", i))
	}
	cr := e.crClient()
	e.eventually(30*time.Second, "the annotated gang's PodGroup deleted with its pods", func(ctx context.Context) (bool, error) {
		err := cr.Get(ctx, client.ObjectKey{Namespace: "default", Name: "koord"}, &schedulingv1alpha1.PodGroup{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
