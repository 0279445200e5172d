package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"
)

// scheduler is kube-scheduler's scheduling cycle for one seed, without an
// API server: the scheduler's own cache, snapshot, DRA manager and a
// framework with real plugins, over a fake clientset that holds the
// cluster's ResourceSlices, DeviceClasses and the sample's claims.
//
// What is not kube-scheduler's: pods come from a list rather than the
// scheduling queue (no queue sort, PreEnqueue, backoff or retries, and
// no opportunistic batching), no pod exists in the clientset (the Bind
// plugins are not run; a pod is added to the cache as its informer would
// add it once bound), and nothing preempts (PostFilter is not run).
type scheduler struct {
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	claims   cache.SharedIndexInformer
	dra      fwk.SharedDRAManager
	cache    internalcache.Cache
	snapshot *internalcache.Snapshot
	fw       framework.Framework
	rng      *rand.Rand
	logger   klog.Logger
	stop     func()
	// sinceSync counts claim writes since the claim informer last caught up.
	sinceSync int
	// percentage is the profile's percentageOfNodesToScore (0: adaptive),
	// nextStart the node the next pod's search starts from.
	percentage int32
	nextStart  int
	// minChunk is the fewest nodes filtered at a time (filterChunk per
	// worker beyond the first).
	minChunk int
}

// informerLag bounds the claims bound (two writes each: the finalizer,
// then the allocation) that the claim informer may lag behind, and
// claimBatch the claims submitted at once: the fake clientset's watch
// holds 100 events and panics when full.
const (
	informerLag = 32
	claimBatch  = 16
)

// newScheduler starts one seed's scheduler with the sample's claims
// already in the clientset, and returns once the DRA manager sees every
// slice, class and claim.
func newScheduler(ctx context.Context, c *Cluster, prof *config.KubeSchedulerProfile, claims []*resourceapi.ResourceClaim, parallelism int, seed uint64) (_ *scheduler, err error) {
	// The cache and the framework record metrics, which must exist.
	metrics.Register()
	ctx, cancel := context.WithCancel(ctx)
	logger := klog.FromContext(ctx)
	client := newClientset(c, claims)
	factory := informers.NewSharedInformerFactory(client, 0)
	s := &scheduler{client: client, factory: factory, logger: logger, rng: rand.New(rand.NewPCG(seed, 0x5c4ed)), percentage: ptr.Deref(prof.PercentageOfNodesToScore, 0), minChunk: 1}
	if parallelism > 1 {
		s.minChunk = filterChunk * parallelism
	}
	s.stop = func() { cancel(); factory.Shutdown() }
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if err := s.startDRA(ctx); err != nil {
		return nil, err
	}
	s.cache = internalcache.New(ctx, nil, utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload), utilfeature.DefaultFeatureGate.Enabled(features.CompositePodGroup))
	for _, n := range c.Nodes {
		s.cache.AddNode(logger, n)
	}
	s.snapshot = internalcache.NewEmptySnapshot()
	if err := s.newFramework(ctx, prof, parallelism); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	if err := s.waitForDRA(ctx, len(c.Slices), len(c.Classes), len(claims)); err != nil {
		return nil, err
	}
	return s, nil
}

// newClientset returns a fake clientset holding the cluster's slices and
// classes and a sample's claims. It has no field management: the
// scheduler writes claims with Update and UpdateStatus, and managed
// fields would cost more than the writes.
func newClientset(c *Cluster, claims []*resourceapi.ResourceClaim) *fake.Clientset {
	objects := make([]runtime.Object, 0, len(c.Slices)+len(c.Classes)+len(claims))
	for _, s := range c.Slices {
		objects = append(objects, s)
	}
	for _, dc := range c.Classes {
		objects = append(objects, dc)
	}
	for _, claim := range claims {
		objects = append(objects, claim)
	}
	client := fake.NewSimpleClientset(objects...)
	client.PrependReactor("*", "resourceclaims", resourceVersions(int64(len(objects))))
	return client
}

// startDRA starts the scheduler's DRA manager as kube-scheduler's New
// wires it: a ResourceSlice tracker and an assume cache of claims over
// the informers.
func (s *scheduler) startDRA(ctx context.Context) error {
	gates := utilfeature.DefaultFeatureGate
	opts := tracker.Options{
		EnableDeviceTaintRules:   gates.Enabled(features.DRADeviceTaintRules),
		EnableConsumableCapacity: gates.Enabled(features.DRAConsumableCapacity),
		SliceInformer:            s.factory.Resource().V1().ResourceSlices(),
		KubeClient:               s.client,
	}
	if opts.EnableDeviceTaintRules {
		opts.TaintInformer = s.factory.Resource().V1().DeviceTaintRules()
	}
	slices, err := tracker.StartTracker(ctx, opts)
	if err != nil {
		return fmt.Errorf("start ResourceSlice tracker: %w", err)
	}
	s.claims = s.factory.Resource().V1().ResourceClaims().Informer()
	claimCache := assumecache.NewAssumeCache(s.logger, s.claims, "ResourceClaim", "", nil)
	s.dra = dynamicresources.NewDRAManager(ctx, claimCache, slices, s.factory)
	// Without consumable capacity DynamicResources does not ask for the
	// state (it lists the allocated devices).
	if opts.EnableConsumableCapacity && !kubeSchedulerDRAManager {
		s.dra = newDRAManager(s.dra, claimCache)
	}
	return nil
}

// kubeSchedulerDRAManager makes replays use kube-scheduler's DRA manager
// as it is, without the replay's GatherAllocatedState (draManager); the
// tests set it to compare the two.
var kubeSchedulerDRAManager = false

// newFramework builds the profile's framework with strata-scheduler's
// registry and the handles kube-scheduler's New gives it.
func (s *scheduler) newFramework(ctx context.Context, prof *config.KubeSchedulerProfile, parallelism int) error {
	registry, err := Registry()
	if err != nil {
		return err
	}
	s.fw, err = frameworkruntime.NewFramework(ctx, registry, prof,
		frameworkruntime.WithClientSet(s.client),
		frameworkruntime.WithInformerFactory(s.factory),
		frameworkruntime.WithSharedDRAManager(s.dra),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(s.factory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithSnapshotSharedLister(s.snapshot),
		frameworkruntime.WithMutableSnapshotLister(s.snapshot),
		frameworkruntime.WithPodNominator(noNominations{}),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithPodGroupManager(s.cache),
		frameworkruntime.WithParallelism(parallelism),
	)
	if err != nil {
		return fmt.Errorf("profile %s: %w", prof.SchedulerName, err)
	}
	return nil
}

// waitForDRA waits until the DRA manager sees the objects: its tracker
// and assume cache fill in informer handlers, which run after the
// informers report synced.
func (s *scheduler) waitForDRA(ctx context.Context, slices, classes, claims int) error {
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		sl, err := s.dra.ResourceSlices().ListWithDeviceTaintRules()
		if err != nil || len(sl) != slices {
			return false, nil
		}
		cl, err := s.dra.ResourceClaims().List()
		if err != nil || len(cl) != claims {
			return false, nil
		}
		dc, err := s.dra.DeviceClasses().List()
		return err == nil && len(dc) == classes, nil
	})
	if err != nil {
		return fmt.Errorf("DRA manager did not see %d slices, %d classes and %d claims: %w", slices, classes, claims, err)
	}
	return nil
}

// resourceVersions assigns increasing resourceVersions to the claims the
// fake clientset stores, as the API server does: the scheduler's assume
// cache keeps the claim it wrote until the informer brings a version at
// least as new, and the fake clientset leaves versions as they are.
func resourceVersions(start int64) k8stesting.ReactionFunc {
	var rv atomic.Int64
	rv.Store(start)
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		var obj runtime.Object
		switch a := action.(type) {
		case k8stesting.CreateAction:
			obj = a.GetObject()
		case k8stesting.UpdateAction:
			obj = a.GetObject()
		default:
			return false, nil, nil
		}
		if m, err := meta.Accessor(obj); err == nil {
			m.SetResourceVersion(strconv.FormatInt(rv.Add(1), 10))
		}
		return false, nil, nil
	}
}

// noNominations is the pod nominator of a scheduler that never preempts.
type noNominations struct{}

func (noNominations) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (noNominations) DeleteNominatedPodIfExists(*corev1.Pod)                        {}
func (noNominations) UpdateNominatedPod(klog.Logger, *corev1.Pod, fwk.PodInfo)      {}
func (noNominations) NominatedPodsForNode(string) []fwk.PodInfo                     { return nil }
