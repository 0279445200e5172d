package gang

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
)

// Resources the plugin reads through dynamic informers.
var (
	podGroupsGVR  = schedulingv1alpha1.GroupVersion.WithResource("podgroups")
	topologiesGVR = topologyv1alpha1.GroupVersion.WithResource("clusternetworktopologies")
)

// Event resources of the CRDs, in the scheduler's "<plural>.<version>.<group>"
// form.
const (
	podGroupEvents = "podgroups.v1alpha1.scheduling.sigs.k8s.io"
	topologyEvents = "clusternetworktopologies.v1alpha1.topology.strata.sh"
)

// DefaultTopologyName is the ClusterNetworkTopology the plugin uses.
const DefaultTopologyName = "default"

// sources reads PodGroups and the ClusterNetworkTopology.
type sources struct {
	dyn        dynamic.Interface
	podGroups  cache.GenericLister
	topologies cache.GenericLister
	synced     []cache.InformerSynced
	// podGroupInformer lets others follow PodGroup deletions.
	podGroupInformer cache.SharedIndexInformer
}

func newSources(ctx context.Context, dyn dynamic.Interface) *sources {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	pg := factory.ForResource(podGroupsGVR)
	topo := factory.ForResource(topologiesGVR)
	s := &sources{dyn: dyn, podGroups: pg.Lister(), topologies: topo.Lister(),
		synced: []cache.InformerSynced{pg.Informer().HasSynced, topo.Informer().HasSynced}, podGroupInformer: pg.Informer()}
	factory.Start(ctx.Done())
	// A cluster without the CRDs never syncs; gangs then come from pod
	// annotations only, so do not wait forever.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(waitCtx.Done(), s.synced...) {
		klog.FromContext(ctx).Info("PodGroup or ClusterNetworkTopology informers did not sync; are the CRDs installed?")
	}
	return s
}

// podGroup returns a PodGroup, or nil if there is none.
func (s *sources) podGroup(namespace, name string) *schedulingv1alpha1.PodGroup {
	obj, err := s.podGroups.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil
	}
	pg := &schedulingv1alpha1.PodGroup{}
	if err := fromUnstructured(obj, pg); err != nil {
		return nil
	}
	return pg
}

// topology returns the cluster's network topology, or nil.
func (s *sources) topology() *topologyv1alpha1.ClusterNetworkTopology {
	obj, err := s.topologies.Get(DefaultTopologyName)
	if err != nil {
		return nil
	}
	t := &topologyv1alpha1.ClusterNetworkTopology{}
	if err := fromUnstructured(obj, t); err != nil {
		return nil
	}
	return t
}

func fromUnstructured(obj runtime.Object, into any) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected %T", obj)
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}
