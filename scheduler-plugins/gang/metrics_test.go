package gang

import (
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
)

// A job-level preemption shows in kube-scheduler's workload-preemption
// metrics, as served, even without its GenericWorkload gate (off by
// default in 1.37): the attempt, the time it took, its victim pods and
// jobs.
func TestPreemptionMetricsAreServed(t *testing.T) {
	registerPreemptionMetrics()
	registerPreemptionMetrics() // twice is harmless
	// served returns the number of observations and their sum.
	served := func(name string, labels map[string]string) (uint64, float64) {
		vec, err := testutil.GetHistogramVecFromGatherer(legacyregistry.DefaultGatherer, name, labels)
		if err != nil {
			return 0, 0 // not served until first observed
		}
		return vec.GetAggregatedSampleCount(), vec.GetAggregatedSampleSum()
	}
	attempts := func() float64 {
		v, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer, "scheduler_workload_preemption_attempts_total", nil, "result")
		if err != nil {
			return 0
		}
		return v[fwk.Success.String()]
	}
	group := map[string]string{"preemptor": "podgroup"}
	a0 := attempts()
	e0, _ := served("scheduler_preemption_evaluation_duration_seconds", map[string]string{"preemptor": "podgroup", "result": fwk.Success.String()})
	v0, vs0 := served("scheduler_workload_preemption_victims", nil)
	_, d0 := served("scheduler_preemption_workload_disruptions", group)

	observePreemption(time.Now().Add(-250*time.Millisecond), fwk.NewStatus(fwk.Success))
	observeVictims(12, 3)

	if got := attempts() - a0; got != 1 {
		t.Errorf("successful preemption attempts grew by %v, want 1", got)
	}
	e1, _ := served("scheduler_preemption_evaluation_duration_seconds", map[string]string{"preemptor": "podgroup", "result": fwk.Success.String()})
	if e1-e0 != 1 {
		t.Errorf("evaluation durations grew by %d, want 1", e1-e0)
	}
	v1, vs1 := served("scheduler_workload_preemption_victims", nil)
	if v1-v0 != 1 || vs1-vs0 != 12 {
		t.Errorf("victims grew by %d observations of %v pods, want 1 of 12", v1-v0, vs1-vs0)
	}
	if _, d1 := served("scheduler_preemption_workload_disruptions", group); d1-d0 != 3 {
		t.Errorf("disrupted jobs grew by %v, want 3", d1-d0)
	}
}
