package report

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
	"github.com/strata-sh/strata/internal/topotree"
)

// Gang is one PodGroup: how many members run and in which network
// domains.
type Gang struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	MinMember int32  `json:"minMember"`
	Pods      int    `json:"pods"`
	Running   int    `json:"running"`
	// Scheduled is the status of the Scheduled condition, with its
	// message when the gang waits.
	Scheduled string `json:"scheduled,omitempty"`
	Message   string `json:"message,omitempty"`
	// Reason is the Scheduled condition's reason while the gang waits
	// ("WaitingForMembers", "Unschedulable", "InvalidGang").
	Reason string `json:"reason,omitempty"`
	// Domains lists, per layer of the ClusterNetworkTopology, the domains
	// the running members are in: "BlockLayer=block-1".
	Domains []string `json:"domains,omitempty"`
	// Preempted is the message of the gang's latest job-level
	// preemption: the cost and the jobs evicted for it.
	Preempted string `json:"preempted,omitempty"`
}

// gangOf names the PodGroup of a pod: by label, or the one
// strata-controller keeps for a gang declared on annotations.
func gangOf(p *corev1.Pod) string {
	if name := p.Labels[schedulingv1alpha1.PodGroupLabel]; name != "" {
		return name
	}
	return schedulingv1alpha1.AnnotatedGang(p)
}

// collectGangs reads PodGroups and places their members in the network.
func collectGangs(ctx context.Context, dyn dynamic.Interface, pods []corev1.Pod, nodes []corev1.Node, preemptions map[types.UID]corev1.Event) ([]Gang, error) {
	list, err := dyn.Resource(schedulingv1alpha1.GroupVersion.WithResource("podgroups")).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil // no PodGroup CRD: no gangs to report
	}
	var layers []topotree.Layer
	if u, err := dyn.Resource(topologyv1alpha1.GroupVersion.WithResource("clusternetworktopologies")).Get(ctx, "default", metav1.GetOptions{}); err == nil {
		var t topologyv1alpha1.ClusterNetworkTopology
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t) == nil {
			layers, _ = topotree.Layers(t.Spec)
		}
	}
	nodeLabels := map[string]map[string]string{}
	for _, n := range nodes {
		nodeLabels[n.Name] = n.Labels
	}
	var out []Gang
	for _, u := range list.Items {
		var pg schedulingv1alpha1.PodGroup
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pg); err != nil {
			return nil, fmt.Errorf("decode PodGroup %s: %w", u.GetName(), err)
		}
		g := Gang{Namespace: pg.Namespace, Name: pg.Name, MinMember: pg.Spec.MinMember}
		if ev, ok := preemptions[pg.UID]; ok {
			g.Preempted = ev.Message
		}
		if c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1alpha1.ConditionScheduled); c != nil {
			g.Scheduled = string(c.Status)
			if c.Status != metav1.ConditionTrue {
				g.Reason, g.Message = c.Reason, c.Message
			}
		}
		domains := make([]map[string]bool, len(layers))
		for i := range domains {
			domains[i] = map[string]bool{}
		}
		for _, p := range pods {
			if p.Namespace != pg.Namespace || gangOf(&p) != pg.Name {
				continue
			}
			g.Pods++
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			g.Running++
			for i, l := range layers {
				for _, k := range l.LabelKeys {
					if v := nodeLabels[p.Spec.NodeName][k]; v != "" {
						domains[i][v] = true
						break
					}
				}
			}
		}
		for i, l := range layers {
			var names []string
			for d := range domains[i] {
				names = append(names, d)
			}
			sort.Strings(names)
			if len(names) > 0 {
				g.Domains = append(g.Domains, l.Name+"="+strings.Join(names, "+"))
			}
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i].Namespace, out[i].Name) < key(out[j].Namespace, out[j].Name) })
	return out, nil
}
