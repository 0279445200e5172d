package controlplane

import (
	"context"
	"fmt"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
)

// startControllers runs the kube-controller-manager controllers that DRA
// depends on. Only the ResourceClaim controller is needed: it creates
// claims from ResourceClaimTemplates, removes finished pods from
// status.reservedFor, deallocates unreserved claims and deletes the claims
// it generated once their pod is gone.
func startControllers(ctx context.Context, client kubernetes.Interface) error {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "resourceclaim-controller")
	factory := informers.NewSharedInformerFactory(client, 0)
	workloadClaims := utilfeature.DefaultFeatureGate.Enabled(features.DRAWorkloadResourceClaims)
	// The PodGroup informer is only used with workload claims; taking it
	// from a factory that is never started keeps it from listing an API
	// that may not be served.
	podGroups := informers.NewSharedInformerFactory(client, 0).Scheduling().V1alpha2().PodGroups()
	if workloadClaims {
		podGroups = factory.Scheduling().V1alpha2().PodGroups()
	}
	ctrl, err := resourceclaim.NewController(logger,
		resourceclaim.Features{
			AdminAccess:            utilfeature.DefaultFeatureGate.Enabled(features.DRAAdminAccess),
			PrioritizedList:        utilfeature.DefaultFeatureGate.Enabled(features.DRAPrioritizedList),
			WorkloadResourceClaims: workloadClaims,
		},
		client,
		factory.Core().V1().Pods(),
		podGroups,
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates(),
	)
	if err != nil {
		return fmt.Errorf("create ResourceClaim controller: %w", err)
	}
	factory.Start(ctx.Done())
	go ctrl.Run(klog.NewContext(ctx, logger), 10)
	return nil
}
