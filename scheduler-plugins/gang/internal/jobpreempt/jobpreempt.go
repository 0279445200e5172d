// Package jobpreempt is the stateful half of StrataGang's job-level
// preemption: the victims a gang may evict (jobs, their devices and the
// PodDisruptionBudgets they would break), the bound that turns down a
// victim set before it is simulated, the evictions and their retries,
// the room nominated to a gang until it is used or given back, and the
// API writes of members' nominated nodes, made off the scheduling loop.
//
// Choosing victims is the pure package preemption; planning a gang (its
// shapes, capacities and topology placement) is the gang plugin's, which
// calls in here and lends what this package needs of it through Host.
// Nothing here imports the plugin.
package jobpreempt

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// NominationTTL bounds how long freed room stays reserved for a gang
// that does not come to use it, and how long a gang whose room was given
// back evicts nothing more.
const NominationTTL = 5 * time.Minute

// EvictTries bounds how often the eviction of one victim is tried (an
// admission webhook or RBAC refusing the delete, the API server
// unreachable) before the gang gives its room up; EvictRetryAfter spaces
// the tries.
const (
	EvictTries      = 3
	EvictRetryAfter = 5 * time.Second
	// evictTimeout bounds the API writes of one round of evictions.
	evictTimeout = 30 * time.Second
	// evictWriters bounds the concurrent deletes of one round.
	evictWriters = 16
)

// Host is what job-level preemption needs from the gang plugin. Its
// methods may be called with the Preemptor's lock held, except Retry, so
// none of them may wait for the Preemptor.
type Host interface {
	// Members lists the pods of a gang.
	Members(gang string) []*corev1.Pod
	// GangOf names the gang of a pod, "" for none.
	GangOf(pod *corev1.Pod) string
	// Snapshot is the scheduler's snapshot, which plans read.
	Snapshot() fwk.SharedLister
	// Claims is the scheduler's view of ResourceClaims.
	Claims() fwk.ResourceClaimTracker
	// Client writes to the API server.
	Client() kubernetes.Interface
	// Retry sends a gang's pending members round again, its last failure
	// no answer for them: nothing else wakes them when an eviction
	// failed or the room was freed, since nothing changes in the cluster
	// that they wait on. Never called with the Preemptor's lock held.
	Retry(logger klog.Logger, gang string)
}

// Config is what a Preemptor is built from.
type Config struct {
	Host Host
	// Pods is the scheduler's pod lister.
	Pods corelisters.PodLister
	// PDBs lists PodDisruptionBudgets; nil when none are read.
	PDBs policylisters.PodDisruptionBudgetLister
	// Plugin names the plugin in rejections and in the DisruptionTarget
	// condition of victims, which a restarted scheduler reads back.
	Plugin string
	// Preemptible is the annotation that, set to "false", keeps a pod
	// from ever being a victim.
	Preemptible string
	// RetryAfter spaces the tries of a refused eviction;
	// EvictRetryAfter when zero.
	RetryAfter time.Duration
}

// Preemptor keeps the preemptions in flight, one nomination per gang.
// mu (nominations.go) guards the nominations and everything in them.
type Preemptor struct {
	host        Host
	pods        corelisters.PodLister
	pdbs        policylisters.PodDisruptionBudgetLister
	plugin      string
	preemptible string
	retryAfter  time.Duration
	writer      *nominationWriter
	nominations
}

// New returns a Preemptor whose nominated nodes are written once Run
// runs.
func New(cfg Config) *Preemptor {
	j := &Preemptor{host: cfg.Host, pods: cfg.Pods, pdbs: cfg.PDBs, plugin: cfg.Plugin,
		preemptible: cfg.Preemptible, retryAfter: cfg.RetryAfter}
	if j.retryAfter == 0 {
		j.retryAfter = EvictRetryAfter
	}
	j.writer = newNominationWriter(cfg.Host.Client, cfg.Pods, nominationRateLimiter())
	j.nominations.init()
	return j
}

// Run writes nominated nodes until ctx ends.
func (j *Preemptor) Run(ctx context.Context) {
	j.writer.run(ctx, nominationWorkers)
}

// Begin records a preemption for a gang and starts its API writes off
// the scheduling loop: the nomination keeps other pods off the room at
// once, the victims in evict (those not waiting in Permit) are evicted
// in the background, and the members' nominated nodes are queued for the
// writer. The preemptor's own nomination (mine) is the scheduler's to
// write; a write of ours still queued for it gives way to it.
func (j *Preemptor) Begin(ctx context.Context, gang string, nom *Nomination, evict []*corev1.Pod, members map[*corev1.Pod]string, preemptor *corev1.Pod, mine string) {
	j.set(gang, nom)
	j.startEvictions(nom, evict)
	go j.evictVictims(context.WithoutCancel(ctx), gang, nom, evict)
	for m, node := range members {
		j.writer.want(m, node)
	}
	if preemptor != nil {
		j.writer.supersede(preemptor, mine)
	}
}

// ForgetPod drops what the writer keeps for a pod that is bound or gone.
func (j *Preemptor) ForgetPod(uid types.UID) {
	j.writer.forget(uid)
}
