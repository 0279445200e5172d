package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
)

// role is one kind of member of a gang: count pods named
// <gang>-<role>-<i>, each asking cpu and claiming gpus GPUs.
type role struct {
	name   string
	count  int
	gpus   int
	cpu    string
	mutate func(*corev1.Pod)
}

// shapedGang creates a PodGroup whose minMember is every member, and its
// members role by role, in the order given.
func (e *env) shapedGang(name string, annotations map[string]string, roles ...role) {
	e.t.Helper()
	total := 0
	for _, r := range roles {
		total += r.count
	}
	pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: schedulingv1alpha1.PodGroupSpec{MinMember: int32(total)}}
	if err := e.crClient().Create(e.ctx, pg); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range roles {
		tmpl := fmt.Sprintf("%s-%s", name, r.name)
		if r.gpus > 0 {
			e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, int64(r.gpus)).Template("default", tmpl))
		}
		for i := 0; i < r.count; i++ {
			w := testutil.MakePod(fmt.Sprintf("%s-%d", tmpl, i)).Scheduler(config.ProfileName).
				Label(schedulingv1alpha1.PodGroupLabel, name).Label("role", r.name).Req(r.cpu, "8Gi")
			if r.gpus > 0 {
				w = w.ClaimTemplate("gpus", tmpl)
			}
			pod := w.Obj()
			if r.mutate != nil {
				r.mutate(pod)
			}
			e.createPod(pod)
		}
	}
}

// nodesOf maps each role of a gang's pods to the nodes they run on.
func nodesOf(pods []corev1.Pod) map[string][]string {
	out := map[string][]string{}
	for _, p := range pods {
		out[p.Labels["role"]] = append(out[p.Labels["role"]], p.Spec.NodeName)
	}
	return out
}

func distinct(s []string) int {
	seen := map[string]bool{}
	for _, v := range s {
		seen[v] = true
	}
	return len(seen)
}

// TestHeterogeneousGangs: an MPI job (a CPU-only launcher, created first,
// and four workers claiming a whole DGX each) and a PyTorch job (a master
// claiming 2 GPUs and three 8-GPU workers), each required in one block.
// The launcher is scheduled first; a plan sized from it alone would put
// every member on one node and never place the workers.
func TestHeterogeneousGangs(t *testing.T) {
	e := startCluster(t, twoBlocks(4))
	e.applyFile(examplesDir + "/gang/topology.yaml")

	e.shapedGang("mpi", preferBlock("MustGather"), role{name: "launcher", count: 1, cpu: "4"}, role{name: "worker", count: 4, gpus: 8, cpu: "32"})
	mpi := e.waitGangRunning("mpi", 5)
	if blocks := e.blocksOf(mpi); len(blocks) != 1 {
		t.Errorf("MPI job spans blocks %v, want one", blocks)
	}
	if n := distinct(nodesOf(mpi)["worker"]); n != 4 {
		t.Errorf("MPI workers on %d nodes, want 4 (each needs a whole node's GPUs)", n)
	}

	e.shapedGang("torch", preferBlock("MustGather"), role{name: "master", count: 1, gpus: 2, cpu: "8"}, role{name: "worker", count: 3, gpus: 8, cpu: "32"})
	torch := e.waitGangRunning("torch", 4)
	if blocks := e.blocksOf(torch); len(blocks) != 1 || blocks[0] == e.blocksOf(mpi)[0] {
		t.Errorf("PyTorch job in blocks %v; want the one block the MPI job left free", blocks)
	}
	placed := nodesOf(torch)
	if n := distinct(placed["worker"]); n != 3 {
		t.Errorf("PyTorch workers on %d nodes, want 3", n)
	}
	for _, w := range placed["worker"] {
		if w == placed["master"][0] {
			t.Errorf("master shares node %s with a worker that holds all its GPUs", w)
		}
	}
	for _, p := range append(mpi, torch...) {
		if p.Labels["role"] == "launcher" {
			continue
		}
		want := map[string]int{"worker": 8, "master": 2}[p.Labels["role"]]
		if got := len(e.claimResults(&p, "gpus")); got != want {
			t.Errorf("%s holds %d GPUs, want %d", p.Name, got, want)
		}
	}
}

// oneWorkerPerNode keeps members of a gang off each other's nodes.
func oneWorkerPerNode(gangName string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{schedulingv1alpha1.PodGroupLabel: gangName}},
				TopologyKey:   corev1.LabelHostname,
			}},
		}}
	}
}

// schedulingAttempts reads the scheduler's attempt counter for Strata's
// profile (all results).
func schedulingAttempts(t *testing.T) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "scheduler_schedule_attempts_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "profile" && l.GetValue() == config.ProfileName {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// TestGangPlansWhatFilterAllows: members that must not share a node
// (required pod anti-affinity) get one node each although every node
// has CPU for eight of them. A gang of five such members on four nodes
// cannot be placed: it says which plugin limits the nodes, binds nothing,
// and is not retried while unrelated pods come and go.
func TestGangPlansWhatFilterAllows(t *testing.T) {
	e := startCluster(t, cpuNodes(4))
	e.shapedGang("spread", nil, role{name: "worker", count: 4, cpu: "2", mutate: oneWorkerPerNode("spread")})
	if n := distinct(nodesOf(e.waitGangRunning("spread", 4))["worker"]); n != 4 {
		t.Fatalf("one-per-node gang on %d nodes, want 4", n)
	}

	e.shapedGang("toomany", nil, role{name: "worker", count: 5, cpu: "2", mutate: oneWorkerPerNode("toomany")})
	var msg string
	e.waitPodGroup("toomany", "gang explained", 30*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		if c == nil || c.Reason != gang.ReasonUnschedulable {
			return false
		}
		msg = c.Message
		return true
	})
	for _, want := range []string{"5 pods do not fit in the cluster: 4 of 5 pods fit", "4 nodes take at most 1 member (InterPodAffinity"} {
		if !strings.Contains(msg, want) {
			t.Errorf("condition %q does not say %q", msg, want)
		}
	}
	if n := boundCount(e.gangPods("toomany")); n != 0 {
		t.Fatalf("%d members of a gang that cannot fit were bound", n)
	}

	// The condition is written from the first member that failed; the
	// others' first attempts may still be under way. Count from when
	// every member has been turned down (or held back before an attempt).
	e.eventually(2*time.Minute, "every member of toomany turned down", func(context.Context) (bool, error) {
		pods := e.gangPods("toomany")
		for _, p := range pods {
			if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse
			}) {
				return false, nil
			}
		}
		return len(pods) == 5, nil
	})
	// Unrelated pods are created, bound and started one after another:
	// none of their events can make room for the gang, so the gang must
	// not be retried (a few attempts in flight when the count began are
	// allowed).
	before := schedulingAttempts(t)
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("bystander-%d", i)
		e.createPod(testutil.MakePod(name).Scheduler(config.ProfileName).Req("100m", "64Mi").Obj())
		e.waitRunning("default", name)
	}
	gangAttempts := schedulingAttempts(t) - before - 12
	if gangAttempts > 5 {
		t.Errorf("the unplaceable gang was retried %v times while unrelated pods started", gangAttempts)
	}
	if n := boundCount(e.gangPods("toomany")); n != 0 {
		t.Fatalf("%d members of a gang that cannot fit were bound", n)
	}
}

// unevenSpines: spine-0 has four blocks of one node, spine-1 one block
// of four nodes; every node holds one member.
const unevenSpines = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: small
  count: 4
  cpu: "16"
  memory: 64Gi
  labels:
    network.topology.nvidia.com/spine: spine-0
    network.topology.nvidia.com/block: small-{index}
- name: big
  count: 4
  cpu: "16"
  memory: 64Gi
  labels:
    network.topology.nvidia.com/spine: spine-1
    network.topology.nvidia.com/block: big
`

// TestGangTakesFewestSwitches: both spines hold the 4-member gang with
// the same room; spine-0 would spread it over four blocks, spine-1 keeps
// it in one.
func TestGangTakesFewestSwitches(t *testing.T) {
	e := startCluster(t, unevenSpines)
	e.applyFile(examplesDir + "/gang/topology.yaml")
	e.shapedGang("job", map[string]string{"scheduling.strata.sh/network-topology-spec": `{"gatherStrategy":[{"layer":"SpineLayer","strategy":"MustGather"}]}`},
		role{name: "worker", count: 4, cpu: "12"})
	if blocks := e.blocksOf(e.waitGangRunning("job", 4)); len(blocks) != 1 || blocks[0] != "big" {
		t.Errorf("gang spans blocks %v, want only block big", blocks)
	}
}

// TestGangMemberInAnotherProfileIsLeftAlone: a pod that names a gang but
// not strata-scheduler goes to the default-scheduler profile, which does
// not run gang scheduling: it is scheduled as a lone pod (its gang is
// incomplete) and an event on it says so, rather than being planned as a
// gang that nothing keeps together.
func TestGangMemberInAnotherProfileIsLeftAlone(t *testing.T) {
	e := startCluster(t, cpuNodes(1))
	pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "default"},
		Spec: schedulingv1alpha1.PodGroupSpec{MinMember: 3}}
	if err := e.crClient().Create(e.ctx, pg); err != nil {
		t.Fatal(err)
	}
	e.createPod(testutil.MakePod("elsewhere-0").Label(schedulingv1alpha1.PodGroupLabel, "elsewhere").Req("1", "1Gi").Obj())
	e.waitRunning("default", "elsewhere-0")
	if msg := e.waitEvent("default", "elsewhere-0", gang.ReasonNotGangScheduled); !strings.Contains(msg, "scheduled as a lone pod") {
		t.Errorf("event %q does not say the pod is scheduled alone", msg)
	}
}
