package e2e

import (
	"strings"
	"testing"

	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/report"
)

// TestWorkloadControllersCreatePods runs the workload examples the way a
// user brings them: a Deployment of 4 replicas with a claim template, a
// StatefulSet, an Indexed Job whose pods form a MustGather gang, a
// DaemonSet, and an MPIJob whose operator is not there. Every controller
// creates its pods and they land where they should; the MPIJob is
// reported as applied with no controller.
func TestWorkloadControllersCreatePods(t *testing.T) {
	const dir = examplesDir + "/workloads"
	r := runSim(t, sim.RunOptions{ClusterFile: dir + "/cluster.yaml", Manifests: []string{examplesDir + "/gang/topology.yaml", dir}})
	block := map[string]string{}
	for _, n := range r.Nodes {
		block[n.Name] = n.Labels[blockLabel]
	}
	byOwner := map[string][]report.Pod{}
	for _, p := range r.Pods {
		for _, owner := range []string{"inference-", "store-", "trainer-", "exporter-"} {
			if strings.HasPrefix(p.Name, owner) {
				byOwner[owner] = append(byOwner[owner], p)
			}
		}
		if p.Phase != "Running" {
			t.Errorf("pod %s is %s: %s %s", p.Name, p.Phase, p.Reason, p.Message)
		}
	}
	devices := func(p report.Pod) int {
		n := 0
		for _, c := range p.Claims {
			n += len(c.Devices)
		}
		return n
	}
	for owner, want := range map[string]struct{ pods, devices int }{
		"inference-": {4, 1}, "store-": {2, 0}, "trainer-": {4, 2}, "exporter-": {len(r.Nodes), 0},
	} {
		pods := byOwner[owner]
		if len(pods) != want.pods {
			t.Errorf("%d %s pods, want %d", len(pods), owner, want.pods)
		}
		for _, p := range pods {
			if got := devices(p); got != want.devices {
				t.Errorf("%s has %d devices, want %d", p.Name, got, want.devices)
			}
		}
	}
	blocks := map[string]bool{}
	for _, p := range byOwner["trainer-"] {
		blocks[block[p.Node]] = true
	}
	if len(blocks) != 1 {
		t.Errorf("the Job's gang runs in blocks %v, want one (MustGather)", keys(blocks))
	}
	exporterNodes := map[string]bool{}
	for _, p := range byOwner["exporter-"] {
		exporterNodes[p.Node] = true
	}
	if len(exporterNodes) != len(r.Nodes) {
		t.Errorf("DaemonSet pods on %d nodes, want every one of %d", len(exporterNodes), len(r.Nodes))
	}
	if len(r.Uncontrolled) != 1 || r.Uncontrolled[0].Kind != "MPIJob" || r.Uncontrolled[0].Name != "allreduce" ||
		!strings.Contains(r.Uncontrolled[0].Message, "no controller in the simulated cluster runs MPIJob.kubeflow.org") {
		t.Errorf("report of objects nothing runs: %+v, want the MPIJob allreduce named with no controller", r.Uncontrolled)
	}
}
