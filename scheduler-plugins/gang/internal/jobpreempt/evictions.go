package jobpreempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// The eviction state machine. Each victim's eviction is, in turn:
// in flight (startEvictions, until evictVictims records how it went);
// done (err nil: the pod is deleted, or was gone); held back (errHeldBack:
// another victim's delete was refused, so none was made); or refused
// (err: the API said no, or could not be reached). A victim held back or
// refused that is still there is evicted again once the retry interval
// has passed. After EvictTries refusals the gang gives its room up
// (Pending); failures that say nothing about the delete itself (the API
// server unreachable, restarting, overloaded) are not refusals, and give
// the room up only once they have lasted NominationTTL.

// eviction is where the eviction of one victim stands.
type eviction struct {
	// tries counts the tries; refused those the API turned down.
	tries    int
	refused  int
	inFlight bool
	at       time.Time // when the last try ended
	err      error     // why the last try failed; nil if it did not
	// failingSince is when the tries started failing for want of an
	// answer; zero while they get one.
	failingSince time.Time
}

// transient reports whether a failed delete says nothing about whether
// the victim may be deleted: the API server could not be reached, timed
// out, was overloaded or failed inside (429, 5xx, a cut connection, a
// timeout). Anything else, an admission webhook or policy, RBAC or a
// precondition saying no, is a refusal.
func transient(err error) bool {
	if status, ok := err.(apierrors.APIStatus); ok || errors.As(err, &status) {
		code := status.Status().Code
		return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= http.StatusInternalServerError
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err)
}

// errHeldBack marks a victim not evicted because another one's eviction
// was refused.
var errHeldBack = errors.New("not evicted while another victim's eviction is refused")

// startEvictions records that the victims' evictions are under way,
// before the writes start, so that nothing reads them as failed or not
// tried.
func (j *Preemptor) startEvictions(nom *Nomination, victims []*corev1.Pod) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, v := range victims {
		e := nom.evictions[v.UID]
		if e == nil {
			e = &eviction{}
			nom.evictions[v.UID] = e
		}
		e.tries++
		e.inFlight, e.err = true, nil
	}
}

// evictVictims makes the API writes that evict the victims and records
// how each went. The deletes are first sent as a dry run, which runs
// admission (policies, webhooks) without deleting: if any is refused,
// none is evicted, since part of the room gains the gang nothing. If any
// failed, the gang's members are sent round again once the retry
// interval has passed, to try again or give up.
func (j *Preemptor) evictVictims(ctx context.Context, gang string, nom *Nomination, victims []*corev1.Pod) {
	if len(victims) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	// A hung call would keep the evictions in flight, and the gang
	// waiting, for good.
	ctx, cancel := context.WithTimeout(ctx, evictTimeout)
	defer cancel()
	errs := make([]error, len(victims))
	workqueue.ParallelizeUntil(ctx, evictWriters, len(victims), func(i int) {
		errs[i] = j.deleteVictim(ctx, victims[i], true)
	})
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		for i, err := range errs {
			if err == nil {
				errs[i] = errHeldBack
			}
		}
	} else {
		workqueue.ParallelizeUntil(ctx, evictWriters, len(victims), func(i int) {
			errs[i] = j.evict(ctx, victims[i], gang)
		})
	}
	failed := false
	j.mu.Lock()
	for i, err := range errs {
		if err != nil {
			failed = true
			if err != errHeldBack {
				logger.Error(err, "Cannot evict for gang", "gang", gang, "victim", klog.KObj(victims[i]))
			}
		}
		if e := nom.evictions[victims[i].UID]; e != nil {
			e.inFlight, e.at, e.err = false, time.Now(), err
			switch {
			case err == nil || err == errHeldBack:
				e.failingSince = time.Time{}
			case transient(err):
				if e.failingSince.IsZero() {
					e.failingSince = e.at
				}
			default:
				e.refused++
				e.failingSince = time.Time{}
			}
		}
	}
	j.mu.Unlock()
	if failed {
		time.AfterFunc(j.retryAfter, func() { j.host.Retry(logger, gang) })
	}
}

// failedEvictions is where the victims stand whose last eviction failed
// and that are still there, not terminating.
type failedEvictions struct {
	// again are to be evicted again now.
	again []*corev1.Pod
	// stuck name the victims refused EvictTries times, and why.
	stuck []string
	// waiting name the victims refused, to be tried again at next.
	waiting []string
	next    time.Time
	// notEvicted are all of them.
	notEvicted []types.UID
}

func (j *Preemptor) failedEvictions(nom *Nomination) failedEvictions {
	type failedTry struct {
		uid     types.UID
		name    types.NamespacedName
		refused int
		at      time.Time
		err     error
		since   time.Time
	}
	var failed []failedTry
	j.mu.Lock()
	for uid, e := range nom.evictions {
		if !e.inFlight && e.err != nil {
			failed = append(failed, failedTry{uid, nom.victims[uid], e.refused, e.at, e.err, e.failingSince})
		}
	}
	j.mu.Unlock()
	var out failedEvictions
	for _, f := range failed {
		v, err := j.pods.Pods(f.name.Namespace).Get(f.name.Name)
		if err != nil || v.UID != f.uid || v.DeletionTimestamp != nil {
			continue // gone, or going, after all
		}
		out.notEvicted = append(out.notEvicted, f.uid)
		refused := f.err != errHeldBack
		why := fmt.Sprintf("%s (%v)", f.name, f.err)
		switch {
		case refused && f.refused >= EvictTries:
			out.stuck = append(out.stuck, why+fmt.Sprintf(" after %d tries", f.refused))
		case refused && !f.since.IsZero() && time.Since(f.since) >= NominationTTL:
			out.stuck = append(out.stuck, why+" for "+NominationTTL.String())
		case time.Since(f.at) >= j.retryAfter:
			out.again = append(out.again, v)
		case refused:
			out.waiting = append(out.waiting, why)
			if at := f.at.Add(j.retryAfter); at.After(out.next) {
				out.next = at
			}
		}
	}
	slices.Sort(out.stuck)
	slices.Sort(out.waiting)
	slices.SortFunc(out.again, func(a, b *corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// evict marks a victim with DisruptionTarget, as the scheduler's own
// preemption does, and deletes it.
func (j *Preemptor) evict(ctx context.Context, v *corev1.Pod, gang string) error {
	cond := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler,
		Message: j.evictedFor(gang), LastTransitionTime: metav1.Now()}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	if _, err := j.host.Client().CoreV1().Pods(v.Namespace).Patch(ctx, v.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("mark victim %s/%s: %w", v.Namespace, v.Name, err)
	}
	if err := j.deleteVictim(ctx, v, false); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Evicted for gang", "victim", klog.KObj(v), "gang", gang)
	return nil
}

// deleteVictim deletes a victim, the same pod only (its UID), or with
// dryRun asks whether the API server would let it be deleted.
func (j *Preemptor) deleteVictim(ctx context.Context, v *corev1.Pod, dryRun bool) error {
	opts := metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(v.UID))}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if err := j.host.Client().CoreV1().Pods(v.Namespace).Delete(ctx, v.Name, opts); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("evict victim %s/%s: %w", v.Namespace, v.Name, err)
	}
	return nil
}
