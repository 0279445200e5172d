package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
)

// TestVendorNeutralClaims runs the vendor-neutral examples on a cluster of
// a DGX H100, an Atlas 800T A2 (910B3), an Atlas 800 (910A) and an
// MLU370-X8 server.
func TestVendorNeutralClaims(t *testing.T) {
	raw, err := os.ReadFile(examplesDir + "/mixed/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := startCluster(t, string(raw))
	dir := examplesDir + "/mixed"

	t.Run("any-64gib", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/any-64gib.yaml")
		e.waitRunning("default", "big-memory-worker")
		// Eight H100 (80 GB) and eight 910B3 (64 GB) qualify; the 910A
		// (32 GB) do not: fifteen more pods run, a sixteenth waits.
		for i := 0; i < 16; i++ {
			e.createPod(testutil.MakePod(fmt.Sprintf("big-%d", i)).Scheduler(config.ProfileName).ClaimTemplate("accel", "any-64gib").Obj())
		}
		e.eventually(90*time.Second, "sixteen running, one waiting", func(ctx context.Context) (bool, error) {
			pods, err := e.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			running, waiting := 0, 0
			for i := range pods.Items {
				switch p := &pods.Items[i]; {
				case p.Status.Phase == corev1.PodRunning:
					running++
				case isUnschedulable(p):
					waiting++
				}
			}
			return running == 16 && waiting == 1, nil
		})
		pods, err := e.client.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; strings.HasPrefix(p.Spec.NodeName, "a800-") {
				t.Errorf("%s got a 910A (32 GB) on %s", p.Name, p.Spec.NodeName)
			}
		}
	})

	t.Run("every-vendor", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		// One class for all: each vendor's card, picked by the neutral
		// vendor attribute, is prepared by its own plugin.
		want := map[string]struct{ node, env string }{
			"nvidia":    {"h100-0", "NVIDIA_VISIBLE_DEVICES="},
			"huawei":    {"a2-0", "ASCEND_VISIBLE_DEVICES="},
			"cambricon": {"mlu370-0", "CAMBRICON_VISIBLE_DEVICES="},
		}
		for vendor := range want {
			e.createTemplate(testutil.MakeClaimSpec().Request("accel", "accelerator.strata.sh", 1,
				fmt.Sprintf(`device.attributes["accelerator.strata.sh"].vendor == %q`, vendor)).Template("default", "any-"+vendor))
			e.createPod(testutil.MakePod("on-"+vendor).Scheduler(config.ProfileName).ClaimTemplate("accel", "any-"+vendor).Obj())
		}
		for vendor, w := range want {
			p := e.waitRunning("default", "on-"+vendor)
			if p.Spec.NodeName != w.node && !(vendor == "huawei" && p.Spec.NodeName == "a800-0") {
				t.Errorf("on-%s ran on %s", vendor, p.Spec.NodeName)
			}
			env := e.sim.Nodes.Containers(p.UID)[p.Spec.Containers[0].Name].Env
			if !slices.ContainsFunc(env, func(v string) bool { return strings.HasPrefix(v, w.env) }) {
				t.Errorf("on-%s: container env %v lacks %s", vendor, env, w.env)
			}
		}
	})

	t.Run("first-available", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/h100-else-910b-else-any.yaml")
		e.deletePod("default", "portable-worker")
		// One at a time, so each pod sees the one before it: eight get
		// H100s, the next eight 910Bs, the rest the 910As.
		want := map[int]string{0: "accel/h100", 7: "accel/h100", 8: "accel/ascend-910b", 15: "accel/ascend-910b", 16: "accel/any"}
		for i := 0; i < 17; i++ {
			name := fmt.Sprintf("portable-%d", i)
			e.createPod(testutil.MakePod(name).Scheduler(config.ProfileName).ClaimTemplate("accel", "h100-else-910b-else-any").Obj())
			p := e.waitRunning("default", name)
			got := e.claimResults(p, "accel")[0].Request
			if w, ok := want[i]; ok && got != w {
				t.Errorf("%s (the %d-th) got %s on %s, want %s", name, i+1, got, p.Spec.NodeName, w)
			}
		}
	})
}
