package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/controlplane"
)

// workloadEnv marks the child process that runs with the upstream
// workload API on.
const workloadEnv = "STRATA_E2E_WORKLOAD_API"

const spineLabel = "network.topology.nvidia.com/spine"

// twoSpines has two spines of two blocks of two DGX H100 nodes:
// gpu-0..3 in spine-0 (blocks 0 and 1), gpu-4..7 in spine-1 (2 and 3).
const twoSpines = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: gpu
  count: 8
  cpu: "224"
  memory: 2Ti
  hardware: nvidia-dgx-h100
  labels:
    network.topology.nvidia.com/spine: spine-{index/4}
    network.topology.nvidia.com/block: block-{index/2}
`

// TestUpstreamWorkloadAPI: on a cluster that enables the upstream
// workload API (scheduling.k8s.io/v1beta1 PodGroups under a v1alpha3
// CompositePodGroup), Strata honours every topology level — the job in
// one spine, each of its groups in one block — with DRA-aware capacity,
// while the in-tree GangScheduling plugin keeps quorum; a group that fits
// no block binds nothing. Feature gates are process-wide, so the test
// runs itself again in a child process with the gates on.
func TestUpstreamWorkloadAPI(t *testing.T) {
	if !inGatedChild(t) {
		return
	}
	e := startClusterWith(t, twoSpines, controlplane.Options{
		FeatureGates:  map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true, "CompositePodGroup": true},
		RuntimeConfig: []string{"scheduling.k8s.io/v1beta1=true", "scheduling.k8s.io/v1alpha3=true"},
	})
	// Every GPU of gpu-0 is taken: spine-0 keeps one whole free block,
	// spine-1 two.
	e.occupy([]string{"gpu-0"}, 8)

	job := &schedulingv1alpha3.CompositePodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default"},
		Spec: schedulingv1alpha3.CompositePodGroupSpec{
			WorkloadRef:           &schedulingv1alpha3.WorkloadReference{WorkloadName: "job", TemplateName: "job"},
			SchedulingPolicy:      schedulingv1alpha3.CompositePodGroupSchedulingPolicy{Gang: &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: 2}},
			SchedulingConstraints: &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1alpha3.TopologyConstraint{{Key: spineLabel}}},
			DisruptionMode:        &schedulingv1alpha3.CompositeDisruptionMode{All: &schedulingv1alpha3.AllCompositeDisruptionMode{}},
		},
	}
	if _, err := e.client.SchedulingV1alpha3().CompositePodGroups("default").Create(e.ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CompositePodGroup: %v", err)
	}
	e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 8).Template("default", "whole-node"))
	group := func(name, parent string, members int) {
		pg := &schedulingv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: schedulingv1beta1.PodGroupSpec{
				SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(members)}},
				SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: blockLabel}}},
			},
		}
		if parent != "" {
			pg.Spec.ParentCompositePodGroupName = ptr.To(parent)
			pg.Spec.WorkloadRef = &schedulingv1beta1.WorkloadReference{WorkloadName: parent, TemplateName: "workers"}
		}
		if _, err := e.client.SchedulingV1beta1().PodGroups("default").Create(e.ctx, pg, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PodGroup %s: %v", name, err)
		}
		for i := 0; i < members; i++ {
			pod := testutil.MakePod(fmt.Sprintf("%s-%d", name, i)).Scheduler(config.ProfileName).ClaimTemplate("gpus", "whole-node").Obj()
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
			e.createPod(pod)
		}
	}
	group("workers-a", "job", 2)
	group("workers-b", "job", 2)
	nodeOf := map[string]*corev1.Node{}
	members := []string{"workers-a-0", "workers-a-1", "workers-b-0", "workers-b-1"}
	defer func() {
		if t.Failed() {
			t.Log(e.describePods("default", members...))
		}
	}()
	e.eventually(90*time.Second, "the job's four members running", func(ctx context.Context) (bool, error) {
		for _, name := range members {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, err
			}
			n, err := e.client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			nodeOf[name] = n
		}
		return true, nil
	})
	spines, blocksA, blocksB := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for name, n := range nodeOf {
		spines[n.Labels[spineLabel]] = true
		if name[len("workers-")] == 'a' {
			blocksA[n.Labels[blockLabel]] = true
		} else {
			blocksB[n.Labels[blockLabel]] = true
		}
	}
	if len(spines) != 1 || !spines["spine-1"] {
		t.Errorf("job spans spines %v, want spine-1 alone (the only spine with two free blocks)", spines)
	}
	if len(blocksA) != 1 || len(blocksB) != 1 {
		t.Errorf("groups span blocks %v and %v, want one block each", blocksA, blocksB)
	}

	// Three whole-node members fit no block: none binds, and the
	// scheduler says so on the PodGroup.
	group("trio", "", 3)
	e.eventually(60*time.Second, "trio reported unschedulable", func(ctx context.Context) (bool, error) {
		pg, err := e.client.SchedulingV1beta1().PodGroups("default").Get(ctx, "trio", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		return c != nil && c.Status == metav1.ConditionFalse, nil
	})
	for i := 0; i < 3; i++ {
		p, err := e.client.CoreV1().Pods("default").Get(e.ctx, fmt.Sprintf("trio-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Errorf("member %s bound to %s although the gang fits no block", p.Name, p.Spec.NodeName)
		}
	}
}

// inGatedChild reports whether this process is the child that runs a
// test with the workload API's gates on. Gates are process-wide: in the
// parent it runs the test again in a child process, fails the test with
// the child's output if the child failed, and returns false.
func inGatedChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(workloadEnv) != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), workloadEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run with the workload API's gates failed: %v\n%s", err, tail(out, 6000))
	}
	return false
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestStrataSimFeatureGates: "strata-sim run --feature-gates
// GenericWorkload=true,TopologyAwareWorkloadScheduling=true" serves the
// workload API (the gate brings its API version) and runs a v1beta1
// PodGroup gang from a manifest, inside one block (the topology
// constraint is only read with the second gate; without it the two
// members land wherever there is room). In a child process, because
// gates are process-wide.
func TestStrataSimFeatureGates(t *testing.T) {
	if !inGatedChild(t) {
		return
	}
	r := runSim(t, sim.RunOptions{ClusterFile: examplesDir + "/workloads/cluster.yaml", Manifests: []string{examplesDir + "/workload-api"},
		FeatureGates: map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true}})
	block := map[string]string{}
	for _, n := range r.Nodes {
		block[n.Name] = n.Labels[blockLabel]
	}
	blocks := map[string]bool{}
	for _, p := range r.Pods {
		if p.Phase != "Running" {
			t.Errorf("%s is %s: %s", p.Name, p.Phase, p.Message)
		}
		blocks[block[p.Node]] = true
	}
	if len(r.Pods) != 2 || len(blocks) != 1 {
		t.Errorf("%d pods in blocks %v, want the 2 members in one block", len(r.Pods), keys(blocks))
	}
}

// TestStrataSimRefusesUnknownGates: a misspelt gate stops the run before
// anything boots, naming the gate.
func TestStrataSimRefusesUnknownGates(t *testing.T) {
	err := sim.Run(context.Background(), sim.RunOptions{ClusterFile: examplesDir + "/workloads/cluster.yaml", Format: sim.FormatJSON, Timeout: time.Minute,
		FeatureGates: map[string]bool{"GenericWorkloads": true}, Out: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "GenericWorkloads") {
		t.Errorf("run with an unknown gate: %v, want an error naming it", err)
	}
}

// The forms --feature-gates and --runtime-config accept, and the API
// versions gates bring with them.
func TestFeatureGateAndRuntimeConfigForms(t *testing.T) {
	gates, err := controlplane.ParseFeatureGates("GenericWorkload=true, DRAPartitionableDevices=false")
	if err != nil || len(gates) != 2 || !gates["GenericWorkload"] || gates["DRAPartitionableDevices"] {
		t.Errorf("ParseFeatureGates = %v, %v", gates, err)
	}
	for _, bad := range []string{"GenericWorkload", "GenericWorkload=yes please"} {
		if _, err := controlplane.ParseFeatureGates(bad); err == nil {
			t.Errorf("ParseFeatureGates(%q) accepted", bad)
		}
	}
	for entry, ok := range map[string]bool{
		"scheduling.k8s.io/v1beta1=true": true, "scheduling.k8s.io/v1alpha3": true, "api/alpha=false": true, "v1=true": true,
		"scheduling.k8s.io": false, "scheduling.k8s.io/v1beta1=maybe": false, "/v1=true": false,
	} {
		if err := controlplane.ValidateRuntimeConfig([]string{entry}); (err == nil) != ok {
			t.Errorf("ValidateRuntimeConfig(%q) = %v, want accepted %v", entry, err, ok)
		}
	}
	got := controlplane.WithGateAPIs(map[string]bool{"GenericWorkload": true, "CompositePodGroup": true}, []string{"scheduling.k8s.io/v1alpha3=false"})
	want := []string{"scheduling.k8s.io/v1alpha3=false", "scheduling.k8s.io/v1beta1=true"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("WithGateAPIs = %v, want %v (the user's own setting kept)", got, want)
	}
}
