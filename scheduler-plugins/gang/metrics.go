package gang

import (
	"sync"
	"time"

	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

// preemptorType labels Strata's job-level preemptions in kube-scheduler's
// metrics as the in-tree workload preemption labels a pod group's.
var preemptorType = string(fwk.PodGroupKeyType)

// observePreemption records one job-level preemption decision in
// kube-scheduler's workload-preemption metrics, so that dashboards and
// upstream's benchmarks count a Strata gang's preemption as they count an
// in-tree pod group's: the attempt by its outcome, and how long deciding
// took (scheduler_preemption_evaluation_duration_seconds).
func observePreemption(start time.Time, st *fwk.Status) {
	code := st.Code().String()
	metrics.WorkloadPreemptionAttempts.WithLabelValues(code).Inc()
	metrics.PreemptionEvaluationDuration.WithLabelValues(preemptorType, code).Observe(metrics.SinceInSeconds(start))
}

// observeVictims records what one decision evicts: its pods
// (scheduler_workload_preemption_victims) and the jobs they belong to
// (scheduler_preemption_workload_disruptions).
func observeVictims(pods, jobs int) {
	metrics.WorkloadPreemptionVictims.Observe(float64(pods))
	metrics.PreemptionWorkloadDisruptions.WithLabelValues(preemptorType).Observe(float64(jobs))
}

var registerOnce sync.Once

// registerPreemptionMetrics makes sure the metrics above are served.
// kube-scheduler registers them only with its GenericWorkload feature
// gate, and an unregistered metric records nothing. Its own registration
// runs first (it is idempotent, and New of kube-scheduler calls it before
// any plugin), so that it never finds them registered already.
func registerPreemptionMetrics() {
	registerOnce.Do(func() {
		metrics.Register()
		for _, m := range []basemetrics.Registerable{
			metrics.WorkloadPreemptionAttempts,
			metrics.PreemptionEvaluationDuration,
			metrics.WorkloadPreemptionVictims,
			metrics.PreemptionWorkloadDisruptions,
		} {
			// Registered already where the gate is on.
			_ = legacyregistry.Register(m)
		}
	})
}
