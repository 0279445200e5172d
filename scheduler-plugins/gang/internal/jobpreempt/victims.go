package jobpreempt

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/scheduler-plugins/preemption"
)

// Unit is one job that may be evicted, and its pods.
type Unit struct {
	preemption.Unit
	Victims []*corev1.Pod
}

// Units groups the pods of priority below prio into jobs: jobOf names
// the job of a pod ("" for a pod alone, a job of its own). A job with
// any pod that may not be evicted (of priority prio or more, or with the
// preemptible annotation "false") is no candidate; terminating pods are
// left out. Units come in name order, each with its devices and the
// PodDisruptionBudgets evicting it would break.
func (j *Preemptor) Units(nodes []fwk.NodeInfo, prio int32, jobOf func(*corev1.Pod) string) []Unit {
	byKey := map[string]*Unit{}
	blocked := map[string]bool{}
	var keys []string
	for _, ni := range nodes {
		for _, pi := range ni.GetPods() {
			v := pi.GetPod()
			key := jobOf(v)
			if key == "" {
				key = "pod " + v.Namespace + "/" + v.Name
			}
			if v.DeletionTimestamp != nil {
				continue
			}
			if corev1helpers.PodPriority(v) >= prio || (j.preemptible != "" && v.Annotations[j.preemptible] == "false") {
				blocked[key] = true
				continue
			}
			u := byKey[key]
			if u == nil {
				u = &Unit{Unit: preemption.Unit{ID: key, Priority: corev1helpers.PodPriority(v)}}
				byKey[key] = u
				keys = append(keys, key)
			}
			u.Priority = max(u.Priority, corev1helpers.PodPriority(v))
			u.Victims = append(u.Victims, v)
			u.Pods++
			u.GPUs += j.devicesHeld(v)
		}
	}
	sort.Strings(keys)
	pdbs := j.listPDBs()
	var out []Unit
	for _, k := range keys {
		if blocked[k] {
			continue
		}
		u := byKey[k]
		u.PDBViolations = pdbViolations(pdbs, u.Victims)
		out = append(out, *u)
	}
	return out
}

// Search chooses the cheapest set of units whose eviction makes the gang
// fit (package preemption): fits is the simulation, asked only of sets
// the bound (nil: none) does not turn down. ok is false when even every
// unit is not enough; an empty set means no eviction is needed.
func Search(units []Unit, bound *RoomBound, fits func(set []int) (bool, error)) (set []int, cost preemption.Cost, ok bool, err error) {
	plain := make([]preemption.Unit, len(units))
	for i, u := range units {
		plain[i] = u.Unit
	}
	set, ok, err = preemption.Choose(plain, func(set []int) (bool, error) {
		if bound != nil && !bound.Enough(set) {
			return false, nil
		}
		return fits(set)
	})
	if err != nil || !ok {
		return nil, preemption.Cost{}, ok, err
	}
	return set, preemption.CostOf(plain, set), true, nil
}

func (j *Preemptor) listPDBs() []*policyv1.PodDisruptionBudget {
	if j.pdbs == nil {
		return nil
	}
	list, err := j.pdbs.List(labels.Everything())
	if err != nil {
		return nil
	}
	return list
}

// pdbViolations counts the budgets that evicting pods would break.
func pdbViolations(pdbs []*policyv1.PodDisruptionBudget, pods []*corev1.Pod) int {
	n := 0
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		hit := 0
		for _, v := range pods {
			if v.Namespace == pdb.Namespace && sel.Matches(labels.Set(v.Labels)) {
				hit++
			}
		}
		if hit > 0 && hit > int(pdb.Status.DisruptionsAllowed) {
			n++
		}
	}
	return n
}
