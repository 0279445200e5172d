package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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

// alphaEnv marks the child process that runs with the alpha workload API.
const alphaEnv = "STRATA_E2E_WORKLOAD_API"

// TestUpstreamWorkloadAPI: on a cluster that enables the upstream
// workload API (scheduling.k8s.io/v1alpha2), Strata honours its PodGroups
// (gang minCount) and their topology constraint. Feature gates are
// process-wide, so the test runs itself again in a child process with the
// alpha gates on.
func TestUpstreamWorkloadAPI(t *testing.T) {
	if os.Getenv(alphaEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUpstreamWorkloadAPI$", "-test.v")
		cmd.Env = append(os.Environ(), alphaEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("alpha-gated run failed: %v\n%s", err, tail(out, 4000))
		}
		return
	}
	e := startClusterWith(t, twoBlocks(2), controlplane.Options{
		FeatureGates:  map[string]bool{"GenericWorkload": true, "GangScheduling": true, "TopologyAwareWorkloadScheduling": true},
		RuntimeConfig: []string{"scheduling.k8s.io/v1alpha2=true"},
	})
	e.occupy([]string{"gpu-0"}, 8) // block-0 keeps one free node, block-1 two
	upstreamGang := func(name string, members int) {
		pg := &schedulingv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: schedulingv1beta1.PodGroupSpec{
				SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(members)}},
				SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: blockLabel}}},
			},
		}
		if _, err := e.client.SchedulingV1beta1().PodGroups("default").Create(e.ctx, pg, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create upstream PodGroup: %v", err)
		}
		e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 8).Template("default", name))
		for i := 0; i < members; i++ {
			pod := testutil.MakePod(fmt.Sprintf("%s-%d", name, i)).Scheduler(config.ProfileName).ClaimTemplate("gpus", name).Obj()
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
			e.createPod(pod)
		}
	}
	// Two 8-GPU members need one block with two free nodes: block-1.
	upstreamGang("pair", 2)
	var pods []corev1.Pod
	e.eventually(60*time.Second, "upstream gang running", func(context.Context) (bool, error) {
		pods = nil
		for i := 0; i < 2; i++ {
			p, err := e.client.CoreV1().Pods("default").Get(e.ctx, fmt.Sprintf("pair-%d", i), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.Phase == corev1.PodRunning {
				pods = append(pods, *p)
			}
		}
		return len(pods) == 2, nil
	})
	for _, p := range pods {
		if p.Spec.NodeName != "gpu-2" && p.Spec.NodeName != "gpu-3" {
			t.Errorf("member on %s, outside block-1 (the only block with two free nodes)", p.Spec.NodeName)
		}
	}
	// Three members fit no block: none binds.
	upstreamGang("trio", 3)
	time.Sleep(5 * time.Second)
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

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
