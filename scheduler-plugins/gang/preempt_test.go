package gang

import (
	"testing"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/scheduler-plugins/gang/internal/jobpreempt"
)

// nominateForTest gives a gang a nomination, as a preemption would.
func (p *Plugin) nominateForTest(gang string) {
	p.jobs.Set(gang, jobpreempt.NewNomination(0, nil))
}

// PostFilter's message follows PreFilter's in the pod's condition: what
// PreFilter said is not repeated.
func TestAfterPreFilter(t *testing.T) {
	why := "gang default/job: 4 pods do not fit in the cluster: 2 of 4 pods fit"
	for _, tc := range []struct{ msg, want string }{
		{why, ""},
		{why + "; evicting all 3 lower-priority jobs would not make room either, so nothing was evicted", "evicting all 3 lower-priority jobs would not make room either, so nothing was evicted"},
		{"gang default/job: waiting for 2 pods evicted for it to terminate", "gang default/job: waiting for 2 pods evicted for it to terminate"},
	} {
		st := afterPreFilter(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, tc.msg), why)
		if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != tc.want {
			t.Errorf("afterPreFilter(%q) = %v %q, want %q", tc.msg, st.Code(), st.Message(), tc.want)
		}
	}
}
