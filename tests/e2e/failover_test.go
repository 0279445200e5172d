package e2e

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fwk "k8s.io/kube-scheduler/framework"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/testutil"
	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
	"github.com/strata-sh/strata/sim/controlplane"
)

// replicas keeps, per scheduler replica, its gang plugin and its
// framework handles (the one of each profile), newest incarnation.
type replicas struct {
	mu          sync.Mutex
	plugins     map[string]*gang.Plugin
	handles     map[string][]fwk.Handle
	incarnation map[string]int
}

// haOptions are control plane options for two strata-scheduler replicas
// with kube-scheduler's leader election, as the chart deploys them, and
// what lets a test look into each.
func haOptions() (controlplane.Options, *replicas) {
	r := &replicas{plugins: map[string]*gang.Plugin{}, handles: map[string][]fwk.Handle{}, incarnation: map[string]int{}}
	registry := schedulerplugins.Registry()
	newGang := registry[gang.Name]
	registry[gang.Name] = func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		pl, err := newGang(ctx, obj, h)
		if err != nil {
			return pl, err
		}
		name, incarnation := controlplane.SchedulerReplica(ctx)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.incarnation[name] != incarnation {
			// A new incarnation: the old one's handles go with it.
			r.incarnation[name], r.handles[name] = incarnation, nil
		}
		r.plugins[name] = pl.(*gang.Plugin)
		r.handles[name] = append(r.handles[name], h)
		return pl, err
	}
	return controlplane.Options{
		Plugins:           registry,
		LeaderElection:    &controlplane.LeaderElection{},
		SchedulerReplicas: 2,
	}, r
}

// plugin returns the gang plugin of a replica's newest incarnation.
func (r *replicas) plugin(name string) *gang.Plugin {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plugins[name]
}

// waiting returns the pods a replica holds in Permit.
func (r *replicas) waiting(name string) []string {
	r.mu.Lock()
	handles := append([]fwk.Handle(nil), r.handles[name]...)
	r.mu.Unlock()
	seen := map[types.UID]string{}
	for _, h := range handles {
		h.IterateOverWaitingPods(func(wp fwk.WaitingPod) { seen[wp.GetPod().UID] = wp.GetPod().Name })
	}
	var out []string
	for _, n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// leader waits for a scheduler replica to lead and returns its name and
// identity.
func (e *env) leader() (name, identity string) {
	e.t.Helper()
	e.eventually(time.Minute, "a scheduler replica leads", func(context.Context) (bool, error) {
		for _, st := range e.sim.ControlPlane.SchedulerReplicas() {
			if st.Leading && st.Running {
				name, identity = st.Name, st.Identity
				return true, nil
			}
		}
		return false, nil
	})
	return name, identity
}

// killLeader crashes the leading scheduler replica and waits until
// another incarnation leads (the standby, or the crashed replica started
// again, whichever takes the expired Lease); it returns the new leader.
func (e *env) killLeader() string {
	e.t.Helper()
	name, identity := e.leader()
	start := time.Now()
	if err := e.sim.ControlPlane.KillScheduler(name); err != nil {
		e.t.Fatal(err)
	}
	var next string
	e.eventually(time.Minute, "another scheduler replica leads", func(context.Context) (bool, error) {
		for _, st := range e.sim.ControlPlane.SchedulerReplicas() {
			if st.Leading && st.Running && st.Identity != identity {
				next = st.Name
				return true, nil
			}
		}
		return false, nil
	})
	e.t.Logf("killed leader %s; %s leads %s later", name, next, time.Since(start).Round(time.Millisecond))
	return next
}

// gangMonitor polls the cluster's gangs (pods by a label) and records a
// gang partly bound for longer than settle: members bind one by one, so
// a gang is partly bound for a moment, and after a crash until the new
// leader binds the rest.
type gangMonitor struct {
	e      *env
	label  string
	settle time.Duration

	mu         sync.Mutex
	partial    map[string]time.Time
	longest    time.Duration
	violations []string
	stop       func()
}

// monitorGangs starts a gangMonitor on the pods' PodGroup label; sizes
// maps each gang to its member count.
func (e *env) monitorGangs(sizes map[string]int, settle time.Duration) *gangMonitor {
	m := &gangMonitor{e: e, label: schedulingv1alpha1.PodGroupLabel, settle: settle, partial: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	m.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		wait.UntilWithContext(ctx, func(ctx context.Context) { m.poll(ctx, sizes) }, 100*time.Millisecond)
	}()
	e.t.Cleanup(m.stop)
	return m
}

func (m *gangMonitor) poll(ctx context.Context, sizes map[string]int) {
	pods, err := m.e.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: m.label})
	if err != nil {
		return // the API server may be restarting
	}
	bound := map[string]int{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			bound[p.Labels[m.label]]++
		}
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, size := range sizes {
		n := bound[name]
		if n == 0 || n == size {
			delete(m.partial, name)
			continue
		}
		first, ok := m.partial[name]
		if !ok {
			m.partial[name] = now
			continue
		}
		m.longest = max(m.longest, now.Sub(first))
		if now.Sub(first) > m.settle {
			m.violations = append(m.violations, fmt.Sprintf("%s: gang %s partly bound (%d of %d) for %s", now.Format("15:04:05.000"), name, n, size, now.Sub(first).Round(time.Millisecond)))
			m.partial[name] = now // once per settle period
		}
	}
}

// check stops the monitor and fails the test for every violation.
func (m *gangMonitor) check() {
	m.e.t.Helper()
	m.stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.e.t.Logf("longest a gang was partly bound: %s", m.longest.Round(time.Millisecond))
	for _, v := range m.violations {
		m.e.t.Error(v)
	}
}

var podPath = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/pods/([^/]+)(/eviction)?$`)

// evictions counts, by pod, the deletes and evictions the scheduler
// replicas sent that the API server took or may have taken: dry runs,
// refusals and errors left out. A write whose connection broke before
// the answer (an API server restart) may or may not have landed, so the
// scheduler sends it again; it and the retries that follow it up to the
// first accepted one are one eviction. After an accepted one, every
// write counts: a pod deleted again is evicted twice.
func (e *env) evictions() map[string]int {
	type tally struct {
		n       int
		unknown bool // a write without an answer, nothing accepted yet
	}
	byPod := map[string]*tally{}
	for _, w := range e.sim.ControlPlane.Writes() {
		if !strings.HasPrefix(w.Component, "scheduler") || w.DryRun || w.Refused || w.Code != 0 && (w.Code < 200 || w.Code > 299) {
			continue
		}
		m := podPath.FindStringSubmatch(w.Path)
		if m == nil || !(w.Method == "DELETE" && m[3] == "" || w.Method == "POST" && m[3] != "") {
			continue
		}
		t := byPod[m[1]+"/"+m[2]]
		if t == nil {
			t = &tally{}
			byPod[m[1]+"/"+m[2]] = t
		}
		switch {
		case w.Code != 0 || t.n > 0:
			t.n++
			t.unknown = false
		default:
			t.unknown = true
		}
	}
	out := map[string]int{}
	for pod, t := range byPod {
		out[pod] = t.n
		if t.unknown {
			out[pod]++
		}
	}
	return out
}

// checkEvictedOnce fails the test unless the schedulers evicted exactly
// the pods of want, each once.
func (e *env) checkEvictedOnce(want ...string) {
	e.t.Helper()
	got := e.evictions()
	wantSet := map[string]bool{}
	for _, w := range want {
		wantSet["default/"+w] = true
		if got["default/"+w] != 1 {
			e.t.Errorf("pod %s evicted %d times, want once", w, got["default/"+w])
		}
	}
	for pod, n := range got {
		if !wantSet[pod] {
			e.t.Errorf("pod %s evicted %d times; it was no victim", pod, n)
		}
	}
}

// waitScheduledCondition waits until a gang's PodGroup says it is
// scheduled, which the leader writes once the gang is bound.
func (e *env) waitScheduledCondition(name string) {
	e.t.Helper()
	e.waitPodGroup(name, "PodGroup "+name+" Scheduled=True", time.Minute, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue
	})
}

// TestSchedulerFailoverMidGang: two strata-scheduler replicas with
// leader election. A group of two gangs waits: the parameter servers are
// placed and held in Permit while the workers do not fit. The leader
// crashes (no Lease release, its requests cut): the standby takes the
// Lease, places the parameter servers again and holds them, binding
// nothing. Then room is freed and, with the API slowed so that binding
// takes a while, the new leader crashes as soon as the first member is
// bound. The next leader binds the rest: both gangs end whole and their
// PodGroups say Scheduled; at no time was a gang partly bound for longer
// than it takes a leader to take over.
func TestSchedulerFailoverMidGang(t *testing.T) {
	opts, reps := haOptions()
	e := startClusterWith(t, twoBlocks(2), opts)
	e.occupy([]string{"gpu-0", "gpu-1"}, 8)
	mon := e.monitorGangs(map[string]int{"ps": 2, "workers": 3}, 20*time.Second)

	group := map[string]string{"scheduling.strata.sh/groups": `["default/ps", "default/workers"]`}
	e.gang("ps", 2, 2, 0, group)
	e.gang("workers", 3, 3, 8, group) // three 8-GPU workers, two nodes free
	e.waitGangMessage("workers", "3 pods do not fit in the cluster: 2 of 3 pods fit", 2*time.Minute)
	first, _ := e.leader()
	e.eventually(time.Minute, "the leader holds both parameter servers in Permit", func(context.Context) (bool, error) {
		return len(reps.waiting(first)) == 2, nil
	})

	second := e.killLeader()
	e.eventually(time.Minute, "the new leader holds both parameter servers in Permit", func(context.Context) (bool, error) {
		return len(reps.waiting(second)) == 2, nil
	})
	if n := boundCount(e.gangPods("ps")) + boundCount(e.gangPods("workers")); n != 0 {
		t.Fatalf("%d pods of the group bound although the workers do not fit", n)
	}

	// Slow every request of the schedulers, so that binding the group
	// takes a while, and crash the leader once the first member is bound.
	e.sim.ControlPlane.SetFault(controlplane.Fault{Latency: 700 * time.Millisecond})
	e.deletePod("default", "filler-gpu-0")
	var boundAtKill int
	e.eventually(2*time.Minute, "a member of the group bound", func(context.Context) (bool, error) {
		boundAtKill = boundCount(e.gangPods("ps")) + boundCount(e.gangPods("workers"))
		return boundAtKill > 0, nil
	})
	e.killLeader()
	e.sim.ControlPlane.SetFault(controlplane.Fault{})
	t.Logf("%d of 5 members bound when the leader crashed", boundAtKill)

	e.waitGangRunning("workers", 3)
	e.waitGangRunning("ps", 2)
	e.waitScheduledCondition("workers")
	e.waitScheduledCondition("ps")
	mon.check()
	e.checkEvictedOnce()
}

// TestSchedulerFailoverMidPreemption: a high-priority GPU gang preempts
// two low-priority pods whose termination a finalizer holds back, and the
// leader crashes while the evictions are outstanding and the members
// nominated. The new leader rebuilds the nomination (its PodGroup says it
// waits for the victims, no new round of evictions), keeps a
// lower-priority pod that asks for GPUs off the freed room, and the gang
// gets all 8 GPUs once the victims are gone. Each victim is evicted
// once, and nothing else.
func TestSchedulerFailoverMidPreemption(t *testing.T) {
	opts, reps := haOptions()
	e := startClusterWith(t, oneH100Node, opts)
	mon := e.monitorGangs(map[string]int{"hp": 2}, 20*time.Second)
	holders := e.gpuGangNominatedOverHolders()
	// The members' nominated nodes and the evictions are written apart:
	// crash once both are in (a crash between them is the next test's).
	e.eventually(30*time.Second, "the holders terminating", func(ctx context.Context) (bool, error) {
		for _, name := range holders {
			p, err := e.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp == nil {
				return false, err
			}
		}
		return true, nil
	})
	next := e.killLeader()
	e.eventually(time.Minute, "the new leader's gang plugin rebuilds the nomination", func(context.Context) (bool, error) {
		p := reps.plugin(next)
		return p != nil && containsString(p.Tracked()["nomination"], "default/hp"), nil
	})
	e.waitGangMessage("hp", "waiting for 2 pods evicted for it to terminate", time.Minute)
	e.lowGPUIntruder()
	e.releaseHolders(holders)
	e.checkGangGotTheGPUs()
	e.waitScheduledCondition("hp")
	mon.check()
	e.checkEvictedOnce(holders...)
}

// TestSchedulerFailoverDuringEvictions: as above, but the leader crashes
// while its evictions are in flight: the API is slowed, and the leader
// is killed as soon as the first victim's delete has been sent. Whatever
// the crash left half done, the victims end evicted once each, nothing
// else is evicted, and the gang runs on the freed GPUs.
func TestSchedulerFailoverDuringEvictions(t *testing.T) {
	opts, _ := haOptions()
	e := startClusterWith(t, oneH100Node, opts)
	e.priorityClasses()
	mon := e.monitorGangs(map[string]int{"hp": 2}, 20*time.Second)
	holders := []string{"gpu-holder-0", "gpu-holder-1"}
	for _, name := range holders {
		e.createTemplate(gpuTemplate(name, 4))
		e.lowPod(name, "h100-0", "1", holdGPUs(name))
	}
	e.sim.ControlPlane.SetFault(controlplane.Fault{Latency: 500 * time.Millisecond})
	e.hpGang("hp", 2, "2", 4, nil)
	e.eventually(2*time.Minute, "the leader starts evicting (a dry run or a delete sent)", func(context.Context) (bool, error) {
		return len(e.evictionAttempts()) > 0, nil
	})
	e.killLeader()
	e.sim.ControlPlane.SetFault(controlplane.Fault{})
	t.Logf("deletes sent when the leader crashed: %v", e.evictionAttempts())
	e.releaseHolders(holders)
	e.checkGangGotTheGPUs()
	e.waitScheduledCondition("hp")
	mon.check()
	for pod, n := range e.evictions() {
		if n > 1 || !containsString([]string{"default/gpu-holder-0", "default/gpu-holder-1"}, pod) {
			t.Errorf("pod %s evicted %d times; want each holder at most once and nothing else", pod, n)
		}
	}
	if got := e.survivors(holders...); len(got) != 0 {
		t.Errorf("holders %v still there; the gang runs on their GPUs", got)
	}
}

// evictionAttempts lists the deletes of pods the schedulers sent, dry
// runs included, answered or cut.
func (e *env) evictionAttempts() []string {
	var out []string
	for _, w := range e.sim.ControlPlane.Writes() {
		if strings.HasPrefix(w.Component, "scheduler") && !w.Refused && w.Method == "DELETE" && podPath.MatchString(w.Path) {
			out = append(out, fmt.Sprintf("%s (%d, dry run %t)", w.Path, w.Code, w.DryRun))
		}
	}
	return out
}

func gpuTemplate(name string, gpus int64) *resourceapi.ResourceClaimTemplate {
	return testutil.MakeClaimSpec().Request("gpus", gpuClass, gpus).Template("default", name)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// holdGPUs gives a pod a claim from the template name and a finalizer
// that holds its termination back until releaseHolders.
func holdGPUs(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Finalizers = []string{"test.strata.sh/hold"}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &name}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	}
}
