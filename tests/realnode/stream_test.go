package realnode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/controller"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/testutil"
)

// TestTwoSchedulerStreamOnRealNode: the install's two guards taken away
// (the routing webhook and the single-allocator policy, restored after),
// so that kube-scheduler and strata-scheduler both allocate the real
// node's GPUs, each blind to what the other holds in memory. Pods with a
// whole GPU, a MIG slice or a share, through either scheduler, and
// strata-scheduler gangs of two, come and go at random (deleted with no
// grace period: the claim is freed in the API server before the node has
// unprepared it, and the next allocation of its GPU reaches the node
// first); every 20 s a
// fault: the plugin's process killed (the kubelet restarts it) or
// strata-scheduler restarted. All the while the claims the node's plugin
// has prepared (as its checkpoint records them) must fit its GPUs, and at the end nothing may be left: no
// checkpoint entry, no CDI spec. STRATA_REALNODE_STREAM sets the length
// in seconds (default 45).
func TestTwoSchedulerStreamOnRealNode(t *testing.T) {
	e, n := nvidiaNode(t)
	ctx := context.Background()
	length := 45 * time.Second
	if v, err := strconv.Atoi(os.Getenv("STRATA_REALNODE_STREAM")); err == nil {
		length = time.Duration(v) * time.Second
	}
	withoutGuards(t, e)

	claimTemplate(t, e, "rs-whole", "nvidia-gpu.strata.sh", "")
	claimTemplate(t, e, "rs-mig", "nvidia-mig.strata.sh", `device.attributes["nvidia.strata.sh"].profile in ["1g.10gb", "2g.20gb"]`)
	claimTemplate(t, e, "rs-share", "nvidia-shared.strata.sh", "", map[string]string{"cores": "40", "memory": "30Gi"})
	templates := []string{"rs-whole", "rs-whole", "rs-mig", "rs-share"}
	slices, err := e.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	layout := testutil.NVIDIALayout(slices.Items, nvidia.DriverName)
	checkpoint := filepath.Join(n.KubeletDir(), "plugins", nvidia.DriverName, "checkpoint.json")

	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crConfig := rest.CopyConfig(e.sim.ControlPlane.Config)
	crConfig.ContentType, crConfig.AcceptContentTypes = "application/json", "application/json"
	cr, err := client.New(crConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(38, 3))
	var live []string
	stats := map[string]int{}
	pod := func(name, template, scheduler string) *corev1.Pod {
		p := withClaim(shellPod(name, n.Name(), map[string]string{"main": "sleep 3600"}, "busybox"), template, "main")
		p.Spec.SchedulerName = scheduler
		return p
	}
	start := time.Now()
	nextFault, nextCheck := start.Add(20*time.Second), start
	for seq := 0; time.Since(start) < length; seq++ {
		switch {
		case len(live) > 0 && (len(live) >= 12 || rng.IntN(10) < 3):
			i := rng.IntN(len(live))
			_ = e.client.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, live[i], metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			live = append(live[:i], live[i+1:]...)
		case rng.IntN(6) == 0:
			name := fmt.Sprintf("rs-gang-%d", seq)
			pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault}, Spec: schedulingv1alpha1.PodGroupSpec{MinMember: 2}}
			if err := cr.Create(ctx, pg); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cr.Delete(context.Background(), pg) })
			for m := 0; m < 2; m++ {
				p := pod(fmt.Sprintf("%s-%d", name, m), "rs-whole", strataScheduler)
				p.Labels = map[string]string{schedulingv1alpha1.PodGroupLabel: name}
				createPod(t, e, p)
				live = append(live, p.Name)
			}
			stats["gang pods"] += 2
		default:
			scheduler := corev1.DefaultSchedulerName
			if rng.IntN(2) == 0 {
				scheduler = strataScheduler
			}
			stats[scheduler+" pods"]++
			p := pod(fmt.Sprintf("rs-%d", seq), templates[rng.IntN(len(templates))], scheduler)
			createPod(t, e, p)
			live = append(live, p.Name)
		}
		if now := time.Now(); now.After(nextFault) {
			stats["faults"]++
			if stats["faults"]%2 == 1 {
				if _, err := n.KillProcesses("nvidia-kubelet-plugin"); err != nil {
					t.Fatal(err)
				}
			} else if err := e.sim.ControlPlane.RestartScheduler(); err != nil {
				t.Fatal(err)
			}
			nextFault = now.Add(20 * time.Second)
		}
		if time.Now().After(nextCheck) {
			stats["checks"]++
			all, err := e.client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			stats["colliding allocations"] = max(stats["colliding allocations"], len(testutil.GPUOverCommits(layout, all.Items)))
			for _, problem := range testutil.GPUOverCommits(layout, checkpointClaims(t, checkpoint)) {
				t.Errorf("prepared on the node beyond its GPUs: %s", problem)
			}
			nextCheck = time.Now().Add(3 * time.Second)
		}
		time.Sleep(400 * time.Millisecond)
	}
	refusals, err := e.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + plugin.OverCommitReason})
	if err != nil {
		t.Fatal(err)
	}
	stats["node refusals"] = len(refusals.Items)
	for i, ev := range refusals.Items {
		if i < 3 {
			t.Logf("refusal %d: %s", i, ev.Message)
		}
	}
	pods, err := e.client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			stats["running at the end"]++
		}
	}
	for _, name := range live {
		_ = e.client.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		claims := checkpointClaims(t, checkpoint)
		specs, _ := filepath.Glob(filepath.Join(n.CDIDir(), "*nvidia*"))
		return len(claims) == 0 && len(specs) == 0, nil
	})
	if err != nil {
		specs, _ := filepath.Glob(filepath.Join(n.CDIDir(), "*nvidia*"))
		t.Errorf("after the stream the node still holds %d checkpoint claims and CDI specs %v", len(checkpointClaims(t, checkpoint)), specs)
	}
	t.Logf("%s of stream on the real node: %v", length, stats)
}

// withoutGuards removes the pod routing webhook and the single-allocator
// policy's binding for the test, as an install with both off would be,
// and puts them back after.
func withoutGuards(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	adm := e.client.AdmissionregistrationV1()
	routing, err := adm.MutatingWebhookConfigurations().Get(ctx, "strata-routing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	binding, err := adm.ValidatingAdmissionPolicyBindings().Get(ctx, "strata-single-allocator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.MutatingWebhookConfigurations().Delete(ctx, routing.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := adm.ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		routing.ResourceVersion, binding.ResourceVersion = "", ""
		if _, err := adm.MutatingWebhookConfigurations().Create(ctx, routing, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the routing webhook: %v", err)
		}
		if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the single-allocator policy: %v", err)
		}
	})
}

// checkpointClaims reads what a plugin's checkpoint file records, as
// claims (testutil.CheckpointClaims): every claim in any phase, each
// device with its share and consumed capacity.
func checkpointClaims(t *testing.T, path string) []resourcev1.ResourceClaim {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the checkpoint: %v", err)
	}
	claims, err := testutil.CheckpointClaims(raw)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return claims
}
