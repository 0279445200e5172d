package controller

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
	"github.com/strata-sh/strata/internal/topotree"
)

// Condition types of ClusterNetworkTopology.
const (
	// ConditionValid is False when the layers do not form one chain.
	ConditionValid = "Valid"
	// ConditionComplete is False when some nodes cannot be placed.
	ConditionComplete = "Complete"
)

// maxUnplacedListed bounds status.unplacedNodes; the count is exact.
const maxUnplacedListed = 100

// TopologyReconciler keeps each ClusterNetworkTopology's status in step
// with the nodes: the domains of every layer, and every node that cannot
// be placed and why. A node is never dropped silently.
type TopologyReconciler struct {
	client.Client
}

// SetupWithManager registers the reconciler. A node that comes, goes or
// changes its labels re-reads every topology; the rest of a node's
// changes (status heartbeats, conditions, taints) place it nowhere else
// and are not watched.
func (r *TopologyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("clusternetworktopology").
		For(&topologyv1alpha1.ClusterNetworkTopology{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allTopologies), builder.WithPredicates(NodePlacementChanged)).
		Complete(r)
}

// NodePlacementChanged passes the node events that can change where a
// node sits in a topology: a node added or deleted, or its labels
// changed.
var NodePlacementChanged = predicate.LabelChangedPredicate{}

func (r *TopologyReconciler) allTopologies(ctx context.Context, _ client.Object) []reconcile.Request {
	var list topologyv1alpha1.ClusterNetworkTopologyList
	if err := r.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, t := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: t.Name}})
	}
	return out
}

// Reconcile rebuilds one topology's status.
func (r *TopologyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var t topologyv1alpha1.ClusterNetworkTopology
	if err := r.Get(ctx, req.NamespacedName, &t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return reconcile.Result{}, err
	}
	status := BuildTopologyStatus(t.Spec, t.Generation, nodes.Items, t.Status.Conditions)
	if equality.Semantic.DeepEqual(status, t.Status) {
		return reconcile.Result{}, nil // written already: nothing to send
	}
	t.Status = status
	if err := r.Status().Update(ctx, &t); err != nil {
		return reconcile.Result{}, fmt.Errorf("update status of ClusterNetworkTopology %s: %w", t.Name, err)
	}
	return reconcile.Result{}, nil
}

// BuildTopologyStatus computes the status of a topology over nodes.
func BuildTopologyStatus(spec topologyv1alpha1.ClusterNetworkTopologySpec, generation int64, nodes []corev1.Node, old []metav1.Condition) topologyv1alpha1.ClusterNetworkTopologyStatus {
	st := topologyv1alpha1.ClusterNetworkTopologyStatus{ObservedGeneration: generation, Conditions: append([]metav1.Condition(nil), old...)}
	layers, err := topotree.Layers(spec)
	if err != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionValid, Status: metav1.ConditionFalse, Reason: "InvalidLayers", Message: err.Error(), ObservedGeneration: generation})
		meta.RemoveStatusCondition(&st.Conditions, ConditionComplete)
		return st
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, Reason: "OneChain", Message: fmt.Sprintf("%d layers above the nodes", len(layers)), ObservedGeneration: generation})
	in := make([]topotree.Node, 0, len(nodes))
	for _, n := range nodes {
		in = append(in, topotree.Node{Name: n.Name, Labels: n.Labels})
	}
	tree := topotree.Build(layers, in)
	st.LayerCount = int32(len(layers) + 1)
	for i, l := range layers {
		st.Layers = append(st.Layers, topologyv1alpha1.LayerStatus{Layer: l.Name, Domains: int32(len(tree.Domains[i]))})
		names := make([]string, 0, len(tree.Domains[i]))
		for name := range tree.Domains[i] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			d := tree.Domains[i][name]
			ds := topologyv1alpha1.DomainStatus{Layer: l.Name, Name: name, Nodes: int32(d.NodeCount())}
			if d.Parent != nil {
				ds.Parent = d.Parent.Name
			}
			st.Domains = append(st.Domains, ds)
		}
	}
	st.Layers = append(st.Layers, topologyv1alpha1.LayerStatus{Layer: topologyv1alpha1.NodeTopologyLayer, Domains: int32(len(tree.Leaf))})
	st.UnplacedNodeCount = int32(len(tree.Unplaced))
	for i, u := range tree.Unplaced {
		if i == maxUnplacedListed {
			break
		}
		st.UnplacedNodes = append(st.UnplacedNodes, topologyv1alpha1.UnplacedNode{Name: u.Node, Reason: u.Reason})
	}
	if len(tree.Unplaced) > 0 {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionComplete, Status: metav1.ConditionFalse, Reason: "UnplacedNodes",
			Message: fmt.Sprintf("%d of %d nodes cannot be placed; see status.unplacedNodes", len(tree.Unplaced), len(nodes)), ObservedGeneration: generation})
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionComplete, Status: metav1.ConditionTrue, Reason: "AllNodesPlaced",
			Message: fmt.Sprintf("all %d nodes placed", len(nodes)), ObservedGeneration: generation})
	}
	return st
}
