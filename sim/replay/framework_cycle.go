package replay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// errBug marks an error no correct scheduler run returns: a plugin's
// internal error, or a failure after a node was chosen.
var errBug = errors.New("scheduler error")

// schedule runs a pod through one scheduling cycle and the binding
// cycle's PreBind, as kube-scheduler does, and returns the node it is
// bound to, or "" when no node fits, and how many nodes passed the
// filters. An error wraps errBug; the pod is
// then not placed, and nothing it reserved stays reserved.
func (s *scheduler) schedule(ctx context.Context, pod *corev1.Pod) (node string, feasibleNodes int, err error) {
	if err := s.cache.UpdateSnapshot(s.logger, s.snapshot); err != nil {
		return "", 0, fmt.Errorf("%w: update snapshot: %w", errBug, err)
	}
	state := framework.NewCycleState()
	feasible, err := s.filter(ctx, state, pod)
	if err != nil || len(feasible) == 0 {
		return "", 0, err
	}
	host := feasible[0].Node().Name
	// With one feasible node kube-scheduler does not score.
	if len(feasible) > 1 {
		if host, err = s.score(ctx, state, pod, feasible); err != nil {
			return "", len(feasible), err
		}
	}
	return host, len(feasible), s.bind(ctx, state, pod, host)
}

// filter runs PreFilter, then Filter on the nodes, and returns the
// feasible nodes in the order they were searched.
//
// As kube-scheduler's findNodesThatPassFilters, the search starts where
// the last pod's stopped and ends once the profile's
// percentageOfNodesToScore of the nodes have passed (all of them at 100;
// kube-scheduler's adaptive share when unset or 0). kube-scheduler stops
// the parallel search as soon as enough nodes pass, so which nodes those
// are depends on goroutine timing; the replay searches in chunks of
// nodes (as many as are still wanted), each in parallel, and keeps the
// first nodes to pass in search order, so that a seed repeats.
func (s *scheduler) filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod) ([]fwk.NodeInfo, error) {
	all, err := s.snapshot.NodeInfos().List()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBug, err)
	}
	pre, st, _ := s.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() {
		if st.IsRejected() {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: PreFilter: %w", errBug, st.AsError())
	}
	nodes := all
	if !pre.AllNodes() {
		nodes = nil
		for _, n := range all {
			if pre.NodeNames.Has(n.Node().Name) {
				nodes = append(nodes, n)
			}
		}
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	want := nodesToFind(s.percentage, len(nodes))
	if !s.fw.HasScorePlugins() {
		want = 1 // as kube-scheduler: nothing to choose between
	}
	fits := make([]bool, len(nodes))
	var out []fwk.NodeInfo
	searched := 0
	for searched < len(nodes) && len(out) < want {
		// As many nodes as are still wanted, should they all pass.
		end := min(searched+max(want-len(out), s.minChunk), len(nodes))
		var firstErr atomic.Pointer[fwk.Status]
		s.fw.Parallelizer().Until(ctx, end-searched, func(i int) {
			n := nodes[(s.nextStart+searched+i)%len(nodes)]
			st := s.fw.RunFilterPlugins(ctx, state, pod, n)
			switch {
			case st.IsSuccess():
				fits[searched+i] = true
			case !st.IsRejected():
				firstErr.CompareAndSwap(nil, st)
			}
		}, "Filter")
		if st := firstErr.Load(); st != nil {
			return nil, fmt.Errorf("%w: Filter: %w", errBug, st.AsError())
		}
		for ; searched < end && len(out) < want; searched++ {
			if fits[searched] {
				out = append(out, nodes[(s.nextStart+searched)%len(nodes)])
			}
		}
	}
	// kube-scheduler counts the nodes it searched against all nodes.
	s.nextStart = (s.nextStart + searched) % len(all)
	return out, nil
}

// filterChunk is the fewest nodes the replay filters at a time, per
// worker of the framework's parallelism, so that the parallel search
// keeps its workers busy. Nodes filtered past the last one wanted are
// filtered for nothing; with one worker (the replay runs a seed per
// CPU) the search filters exactly the nodes it keeps or rejects.
const filterChunk = 8

// nodesToFind is kube-scheduler's numFeasibleNodesToFind: how many
// feasible nodes it looks for among n before it stops searching, for a
// profile's percentageOfNodesToScore (0 is adaptive: 50 % less 1 % per
// 125 nodes, at least 5 %; never fewer than 100 nodes).
func nodesToFind(percentage int32, n int) int {
	const minNodes, minPercentage = 100, 5
	if n < minNodes {
		return n
	}
	if percentage == 0 {
		percentage = max(50-int32(n)/125, minPercentage)
	}
	return max(int(int64(n)*int64(percentage)/100), minNodes)
}

// score runs PreScore and Score and picks the node with the highest total
// score, ties at random, as kube-scheduler's selectHost does (with the
// seed's generator, so that a replay repeats).
func (s *scheduler) score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (string, error) {
	if st := s.fw.RunPreScorePlugins(ctx, state, pod, nodes); !st.IsSuccess() {
		return "", fmt.Errorf("%w: PreScore: %w", errBug, st.AsError())
	}
	scores, st := s.fw.RunScorePlugins(ctx, state, pod, nodes)
	if !st.IsSuccess() {
		return "", fmt.Errorf("%w: Score: %w", errBug, st.AsError())
	}
	best, ties := 0, 0
	for i, sc := range scores {
		switch {
		case sc.TotalScore > scores[best].TotalScore:
			best, ties = i, 1
		case sc.TotalScore == scores[best].TotalScore:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return scores[best].Name, nil
}

// bind assumes the pod on host and runs Reserve, Permit, PreBind (where
// DynamicResources writes the claim's allocation through the clientset
// and its assume cache) and PostBind; on failure it unreserves and
// forgets the pod.
func (s *scheduler) bind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, host string) error {
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = host
	if err := s.cache.AssumePod(s.logger, assumed); err != nil {
		return fmt.Errorf("%w: assume: %w", errBug, err)
	}
	fail := func(stage string, st *fwk.Status) error {
		s.fw.RunReservePluginsUnreserve(ctx, state, assumed, host)
		if err := s.cache.ForgetPod(s.logger, assumed); err != nil {
			return fmt.Errorf("%w: %s on %s: %w; forget: %w", errBug, stage, host, st.AsError(), err)
		}
		return fmt.Errorf("%w: %s on %s: %w", errBug, stage, host, st.AsError())
	}
	if st := s.fw.RunReservePluginsReserve(ctx, state, assumed, host); !st.IsSuccess() {
		return fail("Reserve", st)
	}
	// No profile here has a Permit plugin that waits; one that did would
	// need a binding goroutine per pod.
	if _, st := s.fw.RunPermitPlugins(ctx, state, assumed, host); !st.IsSuccess() {
		return fail("Permit", st)
	}
	if st := s.fw.RunPreBindPlugins(ctx, state, assumed, host); !st.IsSuccess() {
		return fail("PreBind", st)
	}
	// What the pod informer's event does once the pod is bound.
	if err := s.cache.AddPod(s.logger, assumed); err != nil {
		return fmt.Errorf("%w: add bound pod: %w", errBug, err)
	}
	s.fw.RunPostBindPlugins(ctx, state, assumed, host)
	if len(pod.Spec.ResourceClaims) > 0 {
		return s.keepInformerUp(ctx, *pod.Spec.ResourceClaims[0].ResourceClaimName)
	}
	return nil
}

// keepInformerUp waits, every informerLag claims written, until the
// claim informer has seen the last write, so that the fake watch never
// overflows.
func (s *scheduler) keepInformerUp(ctx context.Context, claim string) error {
	if s.sinceSync++; s.sinceSync < informerLag {
		return nil
	}
	written, err := s.dra.ResourceClaims().Get(replayNamespace, claim)
	if err != nil {
		return fmt.Errorf("%w: %w", errBug, err)
	}
	return s.awaitInformer(ctx, written)
}

// awaitInformer waits until the claim informer has seen a claim as
// written, and with it every earlier write.
func (s *scheduler) awaitInformer(ctx context.Context, written *resourceapi.ResourceClaim) error {
	key := written.Namespace + "/" + written.Name
	err := wait.PollUntilContextTimeout(ctx, 50*time.Microsecond, time.Minute, true, func(context.Context) (bool, error) {
		obj, ok, err := s.claims.GetStore().GetByKey(key)
		if err != nil || !ok {
			return false, err
		}
		return obj.(*resourceapi.ResourceClaim).ResourceVersion == written.ResourceVersion, nil
	})
	if err != nil {
		return fmt.Errorf("%w: claim informer did not see %s at resourceVersion %s: %w", errBug, key, written.ResourceVersion, err)
	}
	s.sinceSync = 0
	return nil
}

// submit creates the claims of a batch of pods (nil for a pod without)
// and waits until the scheduler's DRA manager sees them. A batch has at
// most claimBatch claims, so that with the writes not yet seen it stays
// within the fake watch's buffer.
func (s *scheduler) submit(ctx context.Context, claims []*resourceapi.ResourceClaim) error {
	var last *resourceapi.ResourceClaim
	for _, claim := range claims {
		if claim == nil {
			continue
		}
		created, err := s.client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create claim %s: %w", claim.Name, err)
		}
		last = created
	}
	if last == nil {
		return nil
	}
	if err := s.awaitInformer(ctx, last); err != nil {
		return err
	}
	// The assume cache fills in the informer's handler, after the store.
	return wait.PollUntilContextTimeout(ctx, 50*time.Microsecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := s.dra.ResourceClaims().Get(last.Namespace, last.Name)
		return err == nil, nil
	})
}
