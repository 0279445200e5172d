package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/controller"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim/controlplane"
)

// twoGPUNodes is two DGX H100 nodes, 8 GPUs each.
const twoGPUNodes = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: h100
  count: 2
  hardware: nvidia-dgx-h100
`

// gpuHolders runs one low-priority pod holding all 8 GPUs on each of the
// nodes and returns their names.
func (e *env) gpuHolders(nodes ...string) []string {
	e.t.Helper()
	var names []string
	for _, n := range nodes {
		name := "holder-" + n
		e.createTemplate(gpuTemplate(name, 8))
		e.lowPod(name, n, "1", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &name}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		})
		names = append(names, name)
	}
	return names
}

// TestAPIServerRestartWhileGangsBindAndVictimsEvicted: one GPU node is
// free, the other is held by a low-priority pod. Two high-priority gangs
// of two 4-GPU members arrive at once, so one binds on the free node
// while the other evicts
// the holder, and kube-apiserver is stopped and started again on the same
// port and etcd in the middle of it. Both gangs end whole, their
// PodGroups say Scheduled, and the holder is evicted once.
func TestAPIServerRestartWhileGangsBindAndVictimsEvicted(t *testing.T) {
	opts, _ := haOptions()
	opts.APIServerRestarts = true
	e := startClusterWith(t, twoGPUNodes, opts)
	e.priorityClasses()
	holders := e.gpuHolders("h100-1")
	mon := e.monitorGangs(map[string]int{"a": 2, "b": 2}, 30*time.Second)
	e.hpGang("a", 2, "2", 4, nil)
	e.hpGang("b", 2, "2", 4, nil)
	// The restart comes once the scheduler has acted: one gang bound or
	// an eviction sent, whichever is first.
	e.eventually(2*time.Minute, "a gang bound or a victim evicted", func(context.Context) (bool, error) {
		return boundCount(e.gangPods("a"))+boundCount(e.gangPods("b")) > 0 || len(e.evictionAttempts()) > 0, nil
	})
	start := time.Now()
	if err := e.sim.ControlPlane.RestartAPIServer(e.ctx); err != nil {
		t.Fatalf("restart the API server: %v", err)
	}
	t.Logf("API server restarted in %s", time.Since(start).Round(time.Millisecond))
	e.waitGangRunning("a", 2)
	e.waitGangRunning("b", 2)
	e.waitScheduledCondition("a")
	e.waitScheduledCondition("b")
	mon.check()
	e.checkEvictedOnce(holders...)
}

// TestGangsSurviveRefusedAndSlowWrites: the schedulers' writes are
// refused for a while, first with 429 and Retry-After (client-go waits
// and tries again), then with 500, and then every request is slowed;
// meanwhile two high-priority gangs arrive, one of which can only run by
// evicting two low-priority pods. Through it all no gang stays partly
// bound, and once the API takes writes again both gangs run whole, their
// PodGroups say Scheduled, and each victim was evicted once.
func TestGangsSurviveRefusedAndSlowWrites(t *testing.T) {
	opts, _ := haOptions()
	e := startClusterWith(t, twoBlocks(2), opts)
	e.priorityClasses()
	holders := e.gpuHolders("gpu-2", "gpu-3")
	cp := e.sim.ControlPlane
	mon := e.monitorGangs(map[string]int{"g1": 2, "g2": 2}, 30*time.Second)

	cp.SetFault(controlplane.Fault{RefuseWrites: 429, RetryAfter: time.Second})
	e.hpGang("g1", 2, "2", 8, nil)
	e.hpGang("g2", 2, "2", 8, nil)
	e.eventually(time.Minute, "the scheduler tries to write and is refused", func(context.Context) (bool, error) {
		return cp.RefusedWrites() > 0, nil
	})
	time.Sleep(5 * time.Second) // the length of the window, not a wait for an outcome
	cp.SetFault(controlplane.Fault{RefuseWrites: 500})
	time.Sleep(5 * time.Second)
	if n := boundCount(e.gangPods("g1")) + boundCount(e.gangPods("g2")); n != 0 {
		t.Errorf("%d members bound while every write was refused", n)
	}
	cp.SetFault(controlplane.Fault{Latency: 300 * time.Millisecond})
	time.Sleep(5 * time.Second)
	cp.SetFault(controlplane.Fault{})
	t.Logf("%d writes refused", cp.RefusedWrites())

	e.waitGangRunning("g1", 2)
	e.waitGangRunning("g2", 2)
	e.waitScheduledCondition("g1")
	e.waitScheduledCondition("g2")
	mon.check()
	e.checkEvictedOnce(holders...)
}

// controllerReplica is a strata-controller replica a test runs itself,
// behind a wire of the fault layer.
type controllerReplica struct {
	name    string
	mgr     manager.Manager
	wire    *controlplane.Wire
	stop    func()
	stopped chan struct{}
}

// startControllerReplicas stops the simulator's strata-controller and
// runs n replicas in its place with controller-runtime's leader election
// and their webhook, as the chart deploys them.
func (e *env) startControllerReplicas(n int) []*controllerReplica {
	e.t.Helper()
	e.sim.StopController()
	const ns = "strata-system"
	id := controlplane.ServiceAccount(ns, "strata-controller")
	route := ""
	if _, err := e.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(e.ctx, controller.DefaultRoutingConfig, metav1.GetOptions{}); err == nil {
		route = config.ProfileName
	}
	var out []*controllerReplica
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("controller-%d", i)
		cfg, wire, err := e.sim.ControlPlane.NewWire(name, &id)
		if err != nil {
			e.t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e.t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		o := controller.Options{
			LeaderElection: true, LeaderElectionNamespace: ns, MetricsAddress: "0", HealthAddress: "0",
			Webhook: controller.WebhookOptions{
				Port: port, Host: "127.0.0.1", CertDir: e.t.TempDir(), ManageCertificates: true, Namespace: ns,
				ServiceName: controller.DefaultWebhookService, SecretName: controller.DefaultWebhookSecret,
				ConfigName: controller.DefaultWebhookConfig, RoutingConfigName: controller.DefaultRoutingConfig, RouteToScheduler: route,
			},
		}
		mgr, err := controller.NewManager(cfg, o)
		if err != nil {
			e.t.Fatal(err)
		}
		unroute := controlplane.RouteService(ns, controller.DefaultWebhookService, 443, &url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
		ctx, cancel := context.WithCancel(e.ctx)
		r := &controllerReplica{name: name, mgr: mgr, wire: wire, stopped: make(chan struct{})}
		go func() {
			defer close(r.stopped)
			_ = mgr.Start(ctx)
		}()
		r.stop = func() {
			wire.Cut()
			cancel()
			<-r.stopped
			unroute()
		}
		e.t.Cleanup(r.stop)
		out = append(out, r)
	}
	// As strata-sim does: ready once the webhook admits a request.
	cr := e.crClient()
	e.eventually(time.Minute, "the replicas' webhook admits requests", func(ctx context.Context) (bool, error) {
		pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: "default"}, Spec: schedulingv1alpha1.PodGroupSpec{MinMember: 1}}
		return cr.Create(ctx, pg, client.DryRunAll) == nil, nil
	})
	return out
}

// controllerLeader waits until one of the replicas leads and returns it.
func (e *env) controllerLeader(reps []*controllerReplica, timeout time.Duration) *controllerReplica {
	e.t.Helper()
	var leader *controllerReplica
	e.eventually(timeout, "a strata-controller replica leads", func(context.Context) (bool, error) {
		for _, r := range reps {
			select {
			case <-r.stopped:
				continue
			default:
			}
			select {
			case <-r.mgr.Elected():
				leader = r
				return true, nil
			default:
			}
		}
		return false, nil
	})
	return leader
}

// podAnnotatedGang creates a gang of n CPU pods declared on the pods
// alone (Koordinator's keys): strata-controller creates its PodGroup.
func (e *env) podAnnotatedGang(name string, n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		pod := testutil.MakePod(fmt.Sprintf("%s-%d", name, i)).Scheduler(config.ProfileName).Req("2", "2Gi").Label(schedulingv1alpha1.PodGroupLabel+"-test", name).Obj()
		pod.Annotations = map[string]string{"gang.scheduling.koordinator.sh/name": name, "gang.scheduling.koordinator.sh/min-available": strconv.Itoa(n)}
		e.createPod(pod)
	}
}

// waitPodGroupRunning waits until strata-controller reports a gang's
// PodGroup Running with n running members.
func (e *env) waitPodGroupRunning(name string, n int) {
	e.t.Helper()
	e.waitPodGroup(name, fmt.Sprintf("PodGroup %s Running with %d members", name, n), 2*time.Minute, func(pg *schedulingv1alpha1.PodGroup, _ *metav1.Condition) bool {
		return pg.Status.Phase == schedulingv1alpha1.PodGroupRunning && pg.Status.Running == int32(n)
	})
}

// TestControllerFailover: two strata-controller replicas with leader
// election. The leader keeps a gang declared on its pods: it creates the
// gang's PodGroup and reports it Running. Then the leader crashes (its
// requests cut, its Lease not released): the standby takes the Lease
// once it expires, creates the PodGroup of a gang declared after the
// crash, reports it Running with every member, and deletes the PodGroup
// of the first gang once its pods are gone.
func TestControllerFailover(t *testing.T) {
	e := startCluster(t, cpuNodes(2))
	reps := e.startControllerReplicas(2)
	first := e.controllerLeader(reps, time.Minute)
	e.podAnnotatedGang("before", 2)
	e.waitPodGroupRunning("before", 2)

	start := time.Now()
	first.stop()
	next := e.controllerLeader(reps, 2*time.Minute)
	t.Logf("killed %s; %s leads %s later", first.name, next.name, time.Since(start).Round(time.Millisecond))
	if next == first {
		t.Fatal("the crashed replica still counts as leader")
	}
	e.podAnnotatedGang("after", 3)
	e.waitPodGroupRunning("after", 3)
	for i := 0; i < 2; i++ {
		e.deletePod("default", fmt.Sprintf("before-%d", i))
	}
	cr := e.crClient()
	e.eventually(time.Minute, "the PodGroup of the deleted gang goes", func(ctx context.Context) (bool, error) {
		var pg schedulingv1alpha1.PodGroup
		err := cr.Get(ctx, client.ObjectKey{Namespace: "default", Name: "before"}, &pg)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
