package replay

// The framework engine replays the trace through kube-scheduler itself.
//
// What is real (the code Kubernetes 1.37 and Strata ship, unchanged):
//   - the ResourceSlices: the NVIDIA kubelet plugin's backend discovers
//     each openb hardware preset (NVML mock, fake sysfs) and
//     plugin.ResourceSlices lays the inventory out as its publisher does;
//   - the DeviceClasses: the Helm chart's;
//   - the scheduling profile: a KubeSchedulerConfiguration decoded,
//     defaulted and validated by kube-scheduler's config code, built into
//     a framework by frameworkruntime.NewFramework with the in-tree
//     registry and Strata's (scheduler-plugins/registry.go);
//   - every plugin, DynamicResources and its structured allocator
//     included, with the scheduler's DRA manager (assume cache, in-flight
//     allocations, ResourceSlice tracker) over informers, but for one
//     method (below);
//   - the scheduler's cache and snapshot (AssumePod, UpdateSnapshot);
//   - the order of one scheduling cycle: UpdateSnapshot, PreFilter,
//     Filter on every node, PreScore and Score on the feasible ones
//     (none with one feasible node), the highest total score with ties at
//     random, AssumePod, Reserve, Permit, PreBind, where DynamicResources
//     writes the claim's allocation.
//
// What is not: there is no API server (a fake clientset stores the
// objects; a reactor gives claims increasing resourceVersions as the
// API server would), no scheduling queue (pods arrive in the sample's
// order, once; an unschedulable pod is not retried), no preemption
// (PostFilter), no Bind plugin (pods are not API objects; the bound pod
// is added to the cache as the pod informer would add it), no
// opportunistic batching (every pod is filtered and scored afresh),
// and no kubelet (claims are allocated, never prepared). The allocated
// state DynamicResources hands the allocator comes from the replay's
// record of the same claims rather than kube-scheduler's per-pod copy
// (draManager): the same answers to every question the allocator asks,
// checked by the tests, for a third of a pod's CPU less.

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// Engines of the replay.
const (
	// EngineModel places pods with the fragment package's model of the
	// allocator and a policy over nodes.
	EngineModel = "model"
	// EngineFramework schedules pods through kube-scheduler's framework
	// and the DRA allocator.
	EngineFramework = "framework"
)

// FrameworkResult is one seed's replay through the framework engine.
type FrameworkResult struct {
	ModelResult
	// Nodes is where each pod of the sample went, "" if nowhere.
	Nodes []string
	// Feasible is how many nodes passed the filters for each pod.
	Feasible []int
	// Errors counts pods a scheduler error failed (a bug: no correct run
	// has any); FirstErrors keeps the first few.
	Errors      int
	FirstErrors []error
}

// maxKeptErrors is how many errors a FrameworkResult keeps.
const maxKeptErrors = 5

// RunFramework replays one seed through kube-scheduler's framework with
// a profile (FrameworkProfiles), with its percentageOfNodesToScore
// unless percentage is set, until arrivals reach until percent of the
// cluster's GPUs (130, the whole protocol, or less: see Until).
// parallelism is the framework's, for Filter and Score over nodes.
func RunFramework(ctx context.Context, c *Cluster, pods []TracePod, profile string, percentage *int32, until int, seed uint64, parallelism int) (*FrameworkResult, error) {
	prof, err := profileWith(profile, percentage)
	if err != nil {
		return nil, err
	}
	res, _, err := replayFramework(ctx, c, Until(Sample(pods, c.TotalMilli, seed), c.TotalMilli, until), prof, seed, parallelism)
	return res, err
}

// replayFramework schedules a sample and returns the result and the
// scheduler, stopped, whose clientset holds the claims as allocated.
//
// A pod's claim is created shortly before the pod is scheduled, as a
// user's claim (or the one the resourceclaim controller makes from a
// template) exists once its pod is submitted: the sample is submitted
// claimBatch pods at a time, each batch once the last is scheduled. The
// claims of pods yet to arrive would change no placement, only make
// every cycle walk them.
func replayFramework(ctx context.Context, c *Cluster, sample []TracePod, prof *config.KubeSchedulerProfile, seed uint64, parallelism int) (*FrameworkResult, *scheduler, error) {
	claims := make([]*resourceapi.ResourceClaim, len(sample))
	for i, p := range sample {
		claim, err := claimObject(i, p, c)
		if err != nil {
			return nil, nil, err
		}
		claims[i] = claim
	}
	s, err := newScheduler(ctx, c, prof, nil, parallelism, seed)
	if err != nil {
		return nil, nil, err
	}
	defer s.stop()
	res := &FrameworkResult{ModelResult: ModelResult{Seed: seed, Curve: NewCurve(c.TotalMilli)}, Nodes: make([]string, len(sample)), Feasible: make([]int, len(sample))}
	for i, p := range sample {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if i%claimBatch == 0 {
			if err := s.submit(ctx, claims[i:min(i+claimBatch, len(claims))]); err != nil {
				return nil, nil, err
			}
		}
		node, feasible, err := s.schedule(ctx, podObject(i, p))
		res.Feasible[i] = feasible
		if err != nil {
			if !errors.Is(err, errBug) {
				return nil, nil, err
			}
			node = ""
			res.Errors++
			if len(res.FirstErrors) < maxKeptErrors {
				res.FirstErrors = append(res.FirstErrors, fmt.Errorf("pod %d (%s): %w", i, p.Name, err))
			}
		}
		res.Nodes[i] = node
		if node == "" {
			res.Failed++
		}
		res.Curve.Add(p, node != "")
	}
	return res, s, nil
}
