package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
	"github.com/strata-sh/strata/sim/controlplane"
)

// soakSettle is how long a gang may be partly bound, or pending without
// a reason, counted while a scheduler can act (a leader holds the Lease
// and the API server runs: the time a failover or an API server restart
// takes does not count), and how long the plugin may keep state about a
// gang whose pods are gone. It covers a new leader's cache sync and a
// Permit round.
const soakSettle = 30 * time.Second

// soakLabel names a pod's gang for the soak, whatever way the gang is
// declared.
const soakLabel = "soak.strata.sh/gang"

// soakGang is one gang of the stream, as the soak tracks it.
type soakGang struct {
	name    string
	kind    string
	pods    int
	created time.Time
	// partial is when the gang was first seen partly bound (zero while it
	// is not); pending when first seen with no member bound; partialDown
	// and pendingDown what the soak's down clock showed then.
	partial, pending         time.Time
	partialDown, pendingDown time.Duration
	scheduled                bool
	preempted                bool
	deleted                  bool
}

// soak drives the stream and checks the invariants.
type soak struct {
	e   *env
	rng *rand.Rand
	cr  client.Client

	// reps are the scheduler replicas when faults are injected, whose
	// leader's gang plugin is the one whose state is checked; plugin is
	// the single scheduler's otherwise.
	reps   *replicas
	plugin func() *gang.Plugin

	gangs map[string]*soakGang
	next  int
	// live is how many gangs the stream keeps, batch how many it creates
	// or deletes at most per step: both grow with the cluster.
	live, batch int
	// failovers, faults and apiRestarts count what was survived.
	failovers, faults, apiRestarts int
	// longestPartial is the longest a gang was seen partly bound, in
	// time the scheduler could act.
	longestPartial time.Duration
	// down adds up the time no scheduler could act: no leader holds the
	// Lease (a failover under way), or the API server is restarting.
	// sampled is when check last looked at the leader.
	down       time.Duration
	sampled    time.Time
	violations map[string]string
	// gone is when the plugin was first seen keeping state about a gang
	// with no pods left, by kind and gang.
	gone map[string]time.Time
}

// TestGangSoak: a seeded random stream of gangs of mixed shapes (uniform,
// launcher + workers, one member per node, extended-resource members,
// declared on pod annotations alone; with and without a MustGather block
// rule, three priorities) is created and deleted on a cluster with a
// three-tier network (spines, blocks, nodes) while, on a random schedule,
// the leading strata-scheduler replica crashes (its standby takes the
// Lease), the schedulers' writes are refused (429 with Retry-After, or
// 500) or slowed for a few seconds, and kube-apiserver restarts.
// Throughout, every half second: no gang is partly bound for longer than
// it takes to settle, no device is allocated to two claims, every gang
// pending beyond that time says why on its PodGroup, and the leader's
// plugin keeps no state (plan, nomination, failure) about a gang whose
// pods are gone (a nomination to a vanished gang among them).
// With STRATA_SOAK_FAULTS=0 there is one scheduler, restarted at random
// moments instead of failing over, and no fault. STRATA_SOAK_SEED
// replays a run, STRATA_SOAK_DURATION makes it longer, STRATA_SOAK_NODES
// larger (make soak: 30 minutes on 500 nodes). make test runs it for a
// minute on 8 nodes.
func TestGangSoak(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("STRATA_SOAK_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("STRATA_SOAK_SEED: %v", err)
		}
		seed = v
	}
	duration := 60 * time.Second
	if s := os.Getenv("STRATA_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("STRATA_SOAK_DURATION: %v", err)
		}
		duration = d
	}
	nodes := 8
	if s := os.Getenv("STRATA_SOAK_NODES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 8 {
			t.Fatalf("STRATA_SOAK_NODES: want a number of nodes, 8 or more, got %q", s)
		}
		nodes = n
	}
	t.Logf("seed %d (STRATA_SOAK_SEED=%d replays it), %s of churn on %d nodes", seed, seed, duration, nodes)

	s := &soak{rng: rand.New(rand.NewPCG(uint64(seed), 0)), gangs: map[string]*soakGang{}, violations: map[string]string{}, gone: map[string]time.Time{}}
	// A gang asks for 14 GPUs on average: a live gang per 2 nodes asks
	// for seven eighths of the cluster's GPUs, which whole-node members
	// and block rules fragment, so that gangs of higher priority preempt
	// (6 gangs on 8 nodes ask for more than there is). A batch per 100
	// nodes keeps the churn within what one scheduler on two cores
	// places.
	s.live, s.batch = max(6, nodes/2), max(1, nodes/100)
	faults := os.Getenv("STRATA_SOAK_FAULTS") != "0"
	var opts controlplane.Options
	if faults {
		opts, s.reps = haOptions()
		opts.APIServerRestarts = true
	} else {
		opts, s.plugin = watchGangPlugin()
	}
	bootStart := time.Now()
	e := startClusterWith(t, soakCluster(nodes), opts)
	t.Logf("cluster of %d nodes up in %s", nodes, time.Since(bootStart).Round(time.Millisecond))
	s.e, s.cr = e, e.crClient()
	e.applyFile(examplesDir + "/gang/topology.yaml")
	e.priorityClasses()
	medium := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "medium-priority"}, Value: 500}
	if _, err := e.client.SchedulingV1().PriorityClasses().Create(e.ctx, medium, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	// The first failover and fault window come early, so that even the
	// short run has both.
	nextFailover := start.Add(s.jitter(8*time.Second, 16*time.Second))
	nextFault := start.Add(s.jitter(18*time.Second, 28*time.Second))
	var faultEnds time.Time
	for time.Since(start) < duration {
		for i := 0; i < s.batch && s.live > s.liveCount(); i++ {
			s.create()
		}
		for i := 0; i < s.batch; i++ {
			if s.rng.IntN(4) == 0 {
				s.deleteOne()
			}
		}
		now := time.Now()
		if now.After(nextFailover) {
			s.failover()
			nextFailover = time.Now().Add(s.jitter(15*time.Second, 40*time.Second))
		}
		if !faultEnds.IsZero() && now.After(faultEnds) {
			e.sim.ControlPlane.SetFault(controlplane.Fault{})
			faultEnds = time.Time{}
		}
		if faults && faultEnds.IsZero() && now.After(nextFault) {
			faultEnds = s.fault()
			nextFault = time.Now().Add(s.jitter(20*time.Second, 45*time.Second))
		}
		s.check()
		time.Sleep(500 * time.Millisecond)
	}
	e.sim.ControlPlane.SetFault(controlplane.Fault{})

	// No more churn: every gang left must settle (whole or explained),
	// then, once all are deleted, nothing may stay behind.
	// A run that does not settle still gets its summary below.
	var unsettled []string
	if err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 2*soakSettle+time.Duration(nodes)*100*time.Millisecond, true, func(context.Context) (bool, error) {
		s.check()
		unsettled = unsettled[:0]
		for _, g := range s.gangs {
			switch {
			case !g.deleted && !g.preempted && !g.scheduled && !g.pending.IsZero() && s.upFor(g.pending, g.pendingDown, time.Now()) < soakSettle:
				unsettled = append(unsettled, g.name+" (pending)")
			case !g.deleted && !g.partial.IsZero():
				unsettled = append(unsettled, g.name+" (partly bound)")
			}
		}
		return len(unsettled) == 0, nil
	}); err != nil {
		slices.Sort(unsettled)
		t.Errorf("the gangs left did not settle: %v", unsettled)
	}
	for _, g := range s.gangs {
		if !g.deleted {
			s.delete(g)
		}
	}
	e.eventually(2*soakSettle+time.Duration(nodes)*100*time.Millisecond, "plugin state and claims of deleted gangs gone", func(ctx context.Context) (bool, error) {
		s.check()
		tracked := s.tracked()
		claims, err := e.client.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var mirrors schedulingv1alpha1.PodGroupList
		if err := s.cr.List(ctx, &mirrors, client.HasLabels{schedulingv1alpha1.FromPodAnnotationsLabel}); err != nil {
			return false, err
		}
		return len(tracked["plan"])+len(tracked["nomination"])+len(tracked["failure"]) == 0 && len(claims.Items) == 0 && len(mirrors.Items) == 0, nil
	})

	created, scheduled, preempted := len(s.gangs), 0, 0
	kinds := map[string]int{}
	for _, g := range s.gangs {
		kinds[g.kind]++
		if g.scheduled {
			scheduled++
		}
		if g.preempted {
			preempted++
		}
	}
	t.Logf("soak summary: %d nodes, %s; %d gangs created %v, %d scheduled whole, %d preempted; survived %d %s, %d fault windows (%d writes refused), %d API server restarts; longest partly bound %s; %d violations",
		nodes, duration, created, kinds, scheduled, preempted, s.failovers, map[bool]string{true: "leader failovers", false: "scheduler restarts (no faults)"}[faults], s.faults, e.sim.ControlPlane.RefusedWrites(), s.apiRestarts, s.longestPartial.Round(time.Millisecond), len(s.violations))
	for _, v := range sortedValues(s.violations) {
		t.Error(v)
	}
	if scheduled < created/3 || s.failovers == 0 || faults && s.faults == 0 {
		t.Errorf("the soak exercised too little: %d of %d gangs scheduled, %d failovers, %d fault windows", scheduled, created, s.failovers, s.faults)
	}
}

// soakCluster is nodes DGX H100 nodes under a three-tier network: blocks
// of 4 nodes, 2 per spine, on a small cluster; on a large one, as
// BenchmarkSimScale lays them out, blocks of 32 and 4 per spine.
func soakCluster(nodes int) string {
	perBlock, blocksPerSpine := 4, 2
	if nodes > 32 {
		perBlock, blocksPerSpine = 32, 4
	}
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
    network.topology.nvidia.com/spine: spine-{index/%d}
    network.topology.nvidia.com/block: block-{index/%d}
`, nodes, perBlock*blocksPerSpine, perBlock)
}

// failover crashes the leading scheduler replica; the standby takes the
// Lease once it expires. With one scheduler, it restarts it.
func (s *soak) failover() {
	cp := s.e.sim.ControlPlane
	if s.reps == nil {
		began := time.Now()
		if err := cp.RestartScheduler(); err != nil {
			s.e.t.Fatalf("restart the scheduler: %v", err)
		}
		s.down += time.Since(began)
		s.sampled = time.Now()
		s.failovers++
		return
	}
	leader := cp.SchedulerLeader()
	if leader == "" {
		return // a takeover is under way
	}
	if err := cp.KillScheduler(leader); err != nil {
		s.e.t.Fatalf("kill the scheduler leader: %v", err)
	}
	s.e.t.Logf("%s: killed the leader %s", time.Now().Format("15:04:05.000"), leader)
	s.failovers++
}

// fault opens a fault window and returns when it ends; one in four is a
// restart of the API server instead, which is over when it returns.
func (s *soak) fault() time.Time {
	cp := s.e.sim.ControlPlane
	s.faults++
	faults := []controlplane.Fault{
		{RefuseWrites: 429, RetryAfter: time.Second},
		{RefuseWrites: 500},
		{Latency: 300 * time.Millisecond},
		{RefuseWrites: 503, RetryAfter: 2 * time.Second, Latency: 100 * time.Millisecond},
	}
	if s.rng.IntN(4) == 0 {
		began := time.Now()
		if err := cp.RestartAPIServer(s.e.ctx); err != nil {
			s.e.t.Fatalf("restart the API server: %v", err)
		}
		s.down += time.Since(began)
		s.sampled = time.Now()
		s.apiRestarts++
		s.e.t.Logf("%s: restarted the API server", time.Now().Format("15:04:05.000"))
		return time.Now()
	}
	f := faults[s.rng.IntN(len(faults))]
	cp.SetFault(f)
	ends := time.Now().Add(s.jitter(3*time.Second, 8*time.Second))
	s.e.t.Logf("%s: fault %+v until %s", time.Now().Format("15:04:05.000"), f, ends.Format("15:04:05.000"))
	return ends
}

func (s *soak) jitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

func (s *soak) liveCount() int {
	n := 0
	for _, g := range s.gangs {
		if !g.deleted {
			n++
		}
	}
	return n
}

// create submits one random gang.
func (s *soak) create() {
	kinds := []string{"uniform", "launcher", "spread", "extended", "annotated"}
	kind := kinds[s.rng.IntN(len(kinds))]
	name := fmt.Sprintf("g%03d-%s", s.next, kind)
	s.next++
	prio := []string{"low-priority", "medium-priority", "high-priority"}[s.rng.IntN(3)]
	withPrio := func(more func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			if p.Labels == nil {
				p.Labels = map[string]string{}
			}
			p.Labels[soakLabel] = name
			p.Spec.PriorityClassName = prio
			if more != nil {
				more(p)
			}
		}
	}
	var annotations map[string]string
	if s.rng.IntN(2) == 0 {
		annotations = preferBlock("MustGather")
	}
	var roles []role
	switch kind {
	case "uniform":
		roles = []role{{name: "worker", count: 2 + s.rng.IntN(3), gpus: []int{2, 4, 8}[s.rng.IntN(3)], cpu: "8", mutate: withPrio(nil)}}
	case "launcher":
		roles = []role{{name: "launcher", count: 1, cpu: "4", mutate: withPrio(nil)}, {name: "worker", count: 2 + s.rng.IntN(2), gpus: 8, cpu: "32", mutate: withPrio(nil)}}
	case "spread":
		roles = []role{{name: "worker", count: 2 + s.rng.IntN(2), gpus: 4, cpu: "8", mutate: withPrio(oneWorkerPerNode(name))}}
	case "extended":
		gpus := resource.MustParse([]string{"4", "8"}[s.rng.IntN(2)])
		roles = []role{{name: "worker", count: 2 + s.rng.IntN(2), cpu: "8", mutate: withPrio(func(p *corev1.Pod) {
			list := corev1.ResourceList{"nvidia.com/gpu": gpus}
			p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = gpus
			p.Spec.Containers[0].Resources.Limits = list
		})}}
	}
	if kind == "annotated" {
		n := 2 + s.rng.IntN(2)
		s.annotatedGang(name, n, annotations, withPrio(nil))
		s.gangs[name] = &soakGang{name: name, kind: kind, pods: n, created: time.Now()}
		return
	}
	s.e.shapedGang(name, annotations, roles...)
	pods := 0
	for _, r := range roles {
		pods += r.count
	}
	s.gangs[name] = &soakGang{name: name, kind: kind, pods: pods, created: time.Now()}
}

// annotatedGang declares a gang of n 4-GPU workers on the pods alone,
// with Koordinator's keys; strata-controller keeps its PodGroup.
func (s *soak) annotatedGang(name string, n int, annotations map[string]string, mutate func(*corev1.Pod)) {
	e := s.e
	tmpl := name + "-worker"
	e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 4).Template("default", tmpl))
	for i := 0; i < n; i++ {
		pod := testutil.MakePod(fmt.Sprintf("%s-%d", tmpl, i)).Scheduler(config.ProfileName).Req("8", "8Gi").ClaimTemplate("gpus", tmpl).Obj()
		pod.Annotations = map[string]string{"gang.scheduling.koordinator.sh/name": name, "gang.scheduling.koordinator.sh/min-available": strconv.Itoa(n)}
		for k, v := range annotations {
			pod.Annotations[k] = v
		}
		mutate(pod)
		e.createPod(pod)
	}
}

// deleteOne deletes a random gang that has run (a job that finished) or,
// now and then, one that is still pending (a user giving up).
func (s *soak) deleteOne() {
	var done, waiting []*soakGang
	for _, g := range s.sortedGangs() {
		switch {
		case g.deleted:
		case g.scheduled || g.preempted:
			done = append(done, g)
		case time.Since(g.created) > 20*time.Second:
			waiting = append(waiting, g)
		}
	}
	if len(done) > 0 {
		s.delete(done[s.rng.IntN(len(done))])
	} else if len(waiting) > 0 && s.rng.IntN(3) == 0 {
		s.delete(waiting[s.rng.IntN(len(waiting))])
	}
}

func (s *soak) delete(g *soakGang) {
	e := s.e
	e.t.Helper()
	sel := metav1.ListOptions{LabelSelector: soakLabel + "=" + g.name}
	if err := e.client.CoreV1().Pods("default").DeleteCollection(e.ctx, metav1.DeleteOptions{}, sel); err != nil {
		e.t.Fatal(err)
	}
	if g.kind != "annotated" { // strata-controller deletes that one
		pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: g.name, Namespace: "default"}}
		if err := client.IgnoreNotFound(s.cr.Delete(e.ctx, pg)); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, r := range []string{"worker", "launcher"} {
		_ = e.client.ResourceV1().ResourceClaimTemplates("default").Delete(e.ctx, g.name+"-"+r, metav1.DeleteOptions{})
	}
	g.deleted = true
}

func (s *soak) sortedGangs() []*soakGang {
	out := make([]*soakGang, 0, len(s.gangs))
	for _, g := range s.gangs {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// tracked is the state the leader's gang plugin keeps; none while no
// replica leads.
func (s *soak) tracked() map[string][]string {
	if s.reps == nil {
		return s.plugin().Tracked()
	}
	if p := s.reps.plugin(s.e.sim.ControlPlane.SchedulerLeader()); p != nil {
		return p.Tracked()
	}
	return map[string][]string{}
}

func (s *soak) violate(key, msg string) {
	if _, seen := s.violations[key]; !seen {
		s.violations[key] = fmt.Sprintf("%s: %s", time.Now().Format("15:04:05.000"), msg)
		s.e.t.Logf("violation: %s", msg)
		if _, gangName, ok := strings.Cut(key, "/"); ok && s.gangs[gangName] != nil {
			s.explain(gangName)
		}
	}
}

// explain logs what a violating gang's pods and PodGroup show, and what
// the leader holds of it, so that a long run's violation can be read
// without replaying it.
func (s *soak) explain(name string) {
	e := s.e
	var b strings.Builder
	fmt.Fprintf(&b, "gang %s at %s, leader %q:", name, time.Now().Format("15:04:05.000"), e.sim.ControlPlane.SchedulerLeader())
	pods, err := e.client.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: soakLabel + "=" + name})
	if err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "\n  pod %s node=%q nominated=%q gates=%d", p.Name, p.Spec.NodeName, p.Status.NominatedNodeName, len(p.Spec.SchedulingGates))
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					fmt.Fprintf(&b, " PodScheduled=%s %s %q at %s", c.Status, c.Reason, c.Message, c.LastTransitionTime.Format("15:04:05"))
				}
			}
		}
	}
	var pg schedulingv1alpha1.PodGroup
	if err := s.cr.Get(e.ctx, client.ObjectKey{Namespace: "default", Name: name}, &pg); err == nil {
		for _, c := range pg.Status.Conditions {
			fmt.Fprintf(&b, "\n  podgroup %s=%s %s %q at %s", c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime.Format("15:04:05"))
		}
	}
	if s.reps != nil {
		for _, w := range s.reps.waiting(e.sim.ControlPlane.SchedulerLeader()) {
			if strings.HasPrefix(w, name+"-") {
				fmt.Fprintf(&b, "\n  waiting in Permit: %s", w)
			}
		}
	}
	for kind, keys := range s.tracked() {
		for _, k := range keys {
			if k == "default/"+name {
				fmt.Fprintf(&b, "\n  leader tracks a %s", kind)
			}
		}
	}
	e.t.Log(b.String())
}

// upFor is how long the scheduler could act between since, when the
// down clock showed downThen, and now: the time settling is allowed is
// counted only while a leader held the Lease and the API server ran.
func (s *soak) upFor(since time.Time, downThen time.Duration, now time.Time) time.Duration {
	return now.Sub(since) - (s.down - downThen)
}

// check looks at the cluster once and records what breaks an invariant.
func (s *soak) check() {
	e := s.e
	now := time.Now()
	if s.reps != nil && !s.sampled.IsZero() && e.sim.ControlPlane.SchedulerLeader() == "" {
		s.down += now.Sub(s.sampled)
	}
	s.sampled = now
	pods, err := e.client.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return // the API server is restarting: look again next time
	}
	type count struct{ present, terminating, bound int }
	byGang := map[string]*count{}
	for _, p := range pods.Items {
		name := p.Labels[soakLabel]
		c := byGang[name]
		if c == nil {
			c = &count{}
			byGang[name] = c
		}
		c.present++
		if p.DeletionTimestamp != nil {
			c.terminating++
		}
		if p.Spec.NodeName != "" {
			c.bound++
		}
	}
	for _, g := range s.sortedGangs() {
		c := byGang[g.name]
		if g.deleted || g.preempted {
			continue
		}
		if c == nil || c.present < g.pods || c.terminating > 0 {
			// Evicted by a gang of higher priority: its job would fail
			// and be deleted.
			g.preempted = true
			s.delete(g)
			continue
		}
		switch {
		case c.bound == g.pods:
			g.scheduled, g.partial, g.pending = true, time.Time{}, time.Time{}
		case c.bound > 0:
			g.pending = time.Time{}
			if g.partial.IsZero() {
				g.partial, g.partialDown = now, s.down
			}
			age := s.upFor(g.partial, g.partialDown, now)
			s.longestPartial = max(s.longestPartial, age)
			if age > soakSettle {
				s.violate("partial/"+g.name, fmt.Sprintf("gang %s partly bound (%d of %d) for %s", g.name, c.bound, g.pods, age.Round(time.Second)))
			}
		default:
			g.partial = time.Time{}
			if g.pending.IsZero() {
				g.pending, g.pendingDown = now, s.down
			} else if age := s.upFor(g.pending, g.pendingDown, now); age > soakSettle {
				var pg schedulingv1alpha1.PodGroup
				if err := s.cr.Get(e.ctx, client.ObjectKey{Namespace: "default", Name: g.name}, &pg); apierrors.IsNotFound(err) {
					s.violate("podgroup/"+g.name, fmt.Sprintf("gang %s pending for %s has no PodGroup", g.name, age.Round(time.Second)))
					continue
				} else if err != nil {
					e.t.Fatal(err)
				}
				cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1alpha1.ConditionScheduled)
				if cond == nil || cond.Status != metav1.ConditionFalse || cond.Message == "" {
					s.violate("reason/"+g.name, fmt.Sprintf("gang %s pending for %s without a reason (condition %+v)", g.name, age.Round(time.Second), cond))
				}
			}
		}
	}

	claims, err := e.client.ResourceV1().ResourceClaims("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	owner := map[string]string{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			dev := r.Driver + "/" + r.Pool + "/" + r.Device
			if other, taken := owner[dev]; taken {
				s.violate("device/"+dev, fmt.Sprintf("device %s allocated to claims %s and %s", dev, other, c.Name))
			}
			owner[dev] = c.Name
		}
	}

	// State the plugin keeps about a gang with no pods left must go.
	for kind, keys := range s.tracked() {
		for _, key := range keys {
			name := strings.TrimPrefix(key, "default/")
			id := kind + "/" + name
			if byGang[name] != nil {
				delete(s.gone, id)
				continue
			}
			if first, ok := s.gone[id]; !ok {
				s.gone[id] = now
			} else if now.Sub(first) > soakSettle {
				s.violate("state/"+id, fmt.Sprintf("plugin keeps a %s for gang %s, whose pods are gone", kind, name))
			}
		}
	}
}

func sortedValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}
