package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
)

func topologyNode(name, block, spine string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"network.topology.nvidia.com/block": block, "network.topology.nvidia.com/spine": spine,
	}}}
}

// TestTopologyWritesOnlyDifferences: a reconcile whose nodes place the
// same as the status says writes nothing; a node moved to another block
// is written once.
func TestTopologyWritesOnlyDifferences(t *testing.T) {
	scheme, err := Scheme()
	must(t, err)
	topo := &topologyv1alpha1.ClusterNetworkTopology{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 1},
		Spec: topologyv1alpha1.ClusterNetworkTopologySpec{NetworkTopologySpec: []topologyv1alpha1.NetworkTopologyLayer{
			{TopologyLayer: "NodeTopologyLayer", ParentTopologyLayer: "BlockLayer"},
			{TopologyLayer: "BlockLayer", ParentTopologyLayer: "SpineLayer", LabelKey: []string{"network.topology.nvidia.com/block"}},
			{TopologyLayer: "SpineLayer", LabelKey: []string{"network.topology.nvidia.com/spine"}},
		}},
	}
	writes := 0
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(topo, topologyNode("n0", "b0", "s0"), topologyNode("n1", "b1", "s0")).
		WithStatusSubresource(&topologyv1alpha1.ClusterNetworkTopology{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}}).Build()
	r := &TopologyReconciler{Client: c}
	reconcileTopology := func() {
		t.Helper()
		_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "default"}})
		must(t, err)
	}
	reconcileTopology()
	if writes != 1 {
		t.Fatalf("first reconcile wrote status %d times, want once", writes)
	}
	for range 3 {
		reconcileTopology()
	}
	if writes != 1 {
		t.Errorf("reconciles with nothing changed wrote status %d more times, want none", writes-1)
	}
	moved := topologyNode("n1", "b0", "s0")
	must(t, c.Update(context.Background(), moved))
	reconcileTopology()
	var got topologyv1alpha1.ClusterNetworkTopology
	must(t, c.Get(context.Background(), client.ObjectKey{Name: "default"}, &got))
	if writes != 2 || len(got.Status.Domains) == 0 || got.Status.Layers[1].Domains != 1 {
		t.Errorf("after a node moved: %d writes, layers %+v, want one more write and one block", writes, got.Status.Layers)
	}
}

// TestNodeEventsThatMoveNoNode: a node's heartbeat or condition change
// does not wake the topology controller; a label change, a new node and
// a deleted one do.
func TestNodeEventsThatMoveNoNode(t *testing.T) {
	old := topologyNode("n0", "b0", "s0")
	heartbeat := old.DeepCopy()
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	heartbeat.ResourceVersion = "2"
	relabelled := old.DeepCopy()
	relabelled.Labels["network.topology.nvidia.com/block"] = "b9"
	if NodePlacementChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: heartbeat}) {
		t.Error("a heartbeat wakes the topology controller")
	}
	if !NodePlacementChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: relabelled}) {
		t.Error("a label change does not wake the topology controller")
	}
	if !NodePlacementChanged.Create(event.CreateEvent{Object: old}) || !NodePlacementChanged.Delete(event.DeleteEvent{Object: old}) {
		t.Error("a node added or deleted does not wake the topology controller")
	}
}
