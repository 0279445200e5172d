package gang

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// One plugin state serves every profile of a scheduler, but only a
// profile that runs StrataGang's Permit can hold a gang back until it is
// whole. A gang member whose schedulerName picks another profile (the
// shipped default-scheduler profile runs StrataGang only to sort the
// queue and guard nominated room) is left alone — scheduled as a lone
// pod, no plan, no quorum — and an event on the pod says so, instead of
// being planned as a gang that nothing then keeps together.

// ReasonNotGangScheduled is the event reason on a gang member scheduled by
// a profile without gang scheduling.
const ReasonNotGangScheduled = "NotGangScheduled"

// profileLister is what the scheduler's framework says about itself.
type profileLister interface {
	ProfileName() string
	ListPlugins() *config.Plugins
}

// profiles remembers the handles of the profiles that created the plugin
// and, once asked, which of them run its Permit.
type profiles struct {
	mu      sync.Mutex
	handles []fwk.Handle
	once    sync.Once
	full    map[string]bool
}

func (ps *profiles) add(h fwk.Handle) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.handles = append(ps.handles, h)
}

// gangs reports whether pods of schedulerName are scheduled as gangs.
// Profiles are all built before the first pod is scheduled, so the answer
// is computed once; a handle that cannot say counts as a gang profile.
func (ps *profiles) gangs(schedulerName string) bool {
	ps.once.Do(func() {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if len(ps.handles) == 0 {
			return // no framework to ask: every profile schedules gangs
		}
		ps.full = map[string]bool{}
		for _, h := range ps.handles {
			l, ok := h.(profileLister)
			if !ok {
				ps.full = nil
				return
			}
			for _, pl := range l.ListPlugins().Permit.Enabled {
				if pl.Name == Name {
					ps.full[l.ProfileName()] = true
				}
			}
		}
	})
	return ps.full == nil || ps.full[schedulerName]
}

// inGangProfile reports whether the pod's profile schedules gangs, and
// tells the pod once when it does not.
func (p *Plugin) inGangProfile(pod *corev1.Pod) bool {
	if p.profiles.gangs(pod.Spec.SchedulerName) {
		return true
	}
	p.status.podEvent(pod, ReasonNotGangScheduled, "pod names gang "+gangKeyOf(pod)+", but scheduler profile "+pod.Spec.SchedulerName+
		" does not run gang scheduling: it is scheduled as a lone pod; set schedulerName to a profile with "+Name+" (strata-scheduler)")
	return false
}
