package jobpreempt

import (
	corev1 "k8s.io/api/core/v1"
)

// What a preemption needs when the scheduler writes the nominated nodes
// of several members itself: an upstream pod group's cycle nominates
// every pod of the group it tried, where a Strata gang's PostFilter
// nominates only the member being scheduled (Begin's preemptor).

// Supersede records that the scheduler writes a member's nominated node
// itself: a write of ours for it, queued or in flight, is followed by the
// same node, so that ours never lands last with another.
func (j *Preemptor) Supersede(pod *corev1.Pod, node string) {
	j.writer.supersede(pod, node)
}

// Holds reports whether a gang's preemption still holds its room: its
// nomination is recorded and was not given back. Pending keeps such a
// gang waiting for its victims, where a nomination given back evicts
// nothing until its back-off ends.
func (j *Preemptor) Holds(gang string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	nom := j.byGang[gang]
	return nom != nil && !nom.spent
}
