package controlplane

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/devicetainteviction"
	"k8s.io/kubernetes/pkg/controller/disruption"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
)

// startControllers runs the kube-controller-manager controllers that DRA
// depends on: the ResourceClaim controller creates claims from
// ResourceClaimTemplates, removes finished pods from status.reservedFor and
// deallocates unreserved claims; the garbage collector deletes generated
// claims (and any other dependents) once their owner is gone; the
// namespace controller empties and removes deleted namespaces; the
// disruption controller keeps PodDisruptionBudget status, which preemption
// reads; the device-taint eviction controller evicts pods from devices
// with NoExecute taints; the workload controllers (WorkloadControllers)
// create the pods of Deployments, StatefulSets, DaemonSets, Jobs and the
// rest.
//
// As in kube-controller-manager, all of them share one informer factory:
// one watch and one cache per resource, however many controllers read it
// (pods alone are read by six).
func startControllers(ctx context.Context, config *restclient.Config, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	metadataClient, err := metadata.NewForConfig(config)
	if err != nil {
		return err
	}
	if err := startGarbageCollector(ctx, client, metadataClient, factory); err != nil {
		return err
	}
	startNamespaceController(ctx, client, metadataClient, factory)
	if err := startDisruptionController(ctx, config, client, factory); err != nil {
		return err
	}
	if err := startResourceClaimController(ctx, client, factory); err != nil {
		return err
	}
	if err := startWorkloadControllers(ctx, client, factory); err != nil {
		return err
	}
	startDeviceTaintEviction(ctx, client, factory)
	// Informers asked for above start now; the controllers wait for their
	// caches themselves.
	factory.Start(ctx.Done())
	return nil
}

func startResourceClaimController(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) error {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "resourceclaim-controller")
	// The PodGroup informer is only used with the workload API; taking it
	// from a factory that is never started otherwise keeps it from
	// listing an API that may not be served.
	podGroups := informers.NewSharedInformerFactory(client, 0).Scheduling().V1beta1().PodGroups()
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		podGroups = factory.Scheduling().V1beta1().PodGroups()
	}
	ctrl, err := resourceclaim.NewController(logger,
		client,
		factory.Core().V1().Pods(),
		podGroups,
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates(),
	)
	if err != nil {
		return fmt.Errorf("create ResourceClaim controller: %w", err)
	}
	go ctrl.Run(klog.NewContext(ctx, logger), 10)
	return nil
}

// startDeviceTaintEviction runs the device-taint eviction controller (GA
// in 1.37): pods whose allocated devices carry a NoExecute taint, from a
// driver's slice or a DeviceTaintRule, and do not tolerate it are
// evicted, so that their claims are released and unprepared.
func startDeviceTaintEviction(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "device-taint-eviction-controller")
	ctx = klog.NewContext(ctx, logger)
	ctrl := devicetainteviction.New(client,
		factory.Core().V1().Pods(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceSlices(),
		factory.Resource().V1().DeviceTaintRules(),
		factory.Resource().V1().DeviceClasses(),
		"device-taint-eviction-controller")
	go func() {
		if err := ctrl.Run(ctx, 10); err != nil && ctx.Err() == nil {
			logger.Error(err, "Device taint eviction stopped")
		}
	}()
}

func startGarbageCollector(ctx context.Context, client kubernetes.Interface, metadataClient metadata.Interface, factory informers.SharedInformerFactory) error {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(client.Discovery()))
	mapper.Reset()
	metadataInformers := metadatainformer.NewSharedInformerFactory(metadataClient, 0)
	started := make(chan struct{})
	close(started)
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, metadataClient, mapper,
		garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(factory, metadataInformers), started)
	if err != nil {
		return fmt.Errorf("create garbage collector: %w", err)
	}
	// The graph builder picks up new resource types (CRDs) on each sync.
	const syncPeriod = 5 * time.Second
	go wait.Until(mapper.Reset, syncPeriod, ctx.Done())
	go gc.Run(ctx, 5, syncPeriod)
	go gc.Sync(ctx, client.Discovery(), syncPeriod)
	metadataInformers.Start(ctx.Done())
	return nil
}

// startNamespaceController deletes what a deleted namespace holds and
// then the namespace, with kube-controller-manager's defaults (10
// workers, a 5-minute resync).
func startNamespaceController(ctx context.Context, client kubernetes.Interface, metadataClient metadata.Interface, factory informers.SharedInformerFactory) {
	ctx = klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), "namespace-controller"))
	nc := namespacecontroller.NewNamespaceController(ctx, client, metadataClient,
		client.Discovery().ServerPreferredNamespacedResources,
		factory.Core().V1().Namespaces(), 5*time.Minute, corev1.FinalizerKubernetes)
	go nc.Run(ctx, 10)
}

func startDisruptionController(ctx context.Context, config *restclient.Config, client kubernetes.Interface, factory informers.SharedInformerFactory) error {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(client.Discovery()))
	scales, err := scale.NewForConfig(config, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(client.Discovery()))
	if err != nil {
		return fmt.Errorf("create scale client: %w", err)
	}
	logger := klog.LoggerWithName(klog.FromContext(ctx), "disruption-controller")
	ctx = klog.NewContext(ctx, logger)
	dc := disruption.NewDisruptionController(ctx,
		factory.Core().V1().Pods(),
		factory.Policy().V1().PodDisruptionBudgets(),
		factory.Core().V1().ReplicationControllers(),
		factory.Apps().V1().ReplicaSets(),
		factory.Apps().V1().Deployments(),
		factory.Apps().V1().StatefulSets(),
		client, mapper, scales, client.Discovery())
	go dc.Run(ctx, 1)
	return nil
}
