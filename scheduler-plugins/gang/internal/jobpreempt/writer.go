package jobpreempt

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/scheduler-plugins/internal/queueworkers"
)

// nominationWorkers is how many pods' nominated nodes are written at
// once. The queue never hands one pod to two workers, so the writes of a
// pod stay in order.
const nominationWorkers = 8

// nominationWriter writes members' status.nominatedNodeName off the
// scheduling loop, as the gang plugin's status writer does for PodGroups:
// the last wanted node of each pod (its namespace, name and UID; empty to
// clear it) is kept until it is written, and a keyed, rate-limited
// workqueue carries the pods. A pod whose wanted node changes while a
// write is queued or failing is written once, with the latest; one that
// changes while a write is in flight is written again after it, so a
// stale node is never the last written. A failed write is retried with
// backoff; a pod that is gone, or is another pod under the same name
// now, is dropped, as is a nomination for a pod that is bound.
type nominationWriter struct {
	client func() kubernetes.Interface
	pods   corelisters.PodLister
	queue  workqueue.TypedRateLimitingInterface[podKey]

	mu sync.Mutex
	// wanted is, per pod UID, the node it should be nominated to and
	// whether that is written. An entry stays until the pod is
	// forgotten (bound or gone) or its nomination is cleared, so that a
	// nomination of ours the lister does not show yet is still cleared.
	wanted map[types.UID]wanted
}

// podKey is a pod's identity.
type podKey struct {
	namespace, name string
	uid             types.UID
}

type wanted struct {
	key     podKey
	node    string // "" clears the nomination
	written bool
}

// nominationRateLimiter backs off a pod whose writes fail, from 100 ms
// doubling to 30 s; the scheduler's client limits the rate of all its
// requests together.
func nominationRateLimiter() workqueue.TypedRateLimiter[podKey] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[podKey](100*time.Millisecond, 30*time.Second)
}

func newNominationWriter(client func() kubernetes.Interface, pods corelisters.PodLister, limiter workqueue.TypedRateLimiter[podKey]) *nominationWriter {
	return &nominationWriter{client: client, pods: pods,
		queue:  workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[podKey]{Name: "gang-nominations"}),
		wanted: map[types.UID]wanted{}}
}

// want queues the write of a pod's nominated node ("" to clear it).
func (w *nominationWriter) want(pod *corev1.Pod, node string) {
	key := podKey{namespace: pod.Namespace, name: pod.Name, uid: pod.UID}
	w.mu.Lock()
	if cur, ok := w.wanted[pod.UID]; ok && cur.node == node {
		w.mu.Unlock()
		return
	}
	w.wanted[pod.UID] = wanted{key: key, node: node}
	w.mu.Unlock()
	w.queue.Add(key)
}

// supersede records that the scheduler writes a pod's nomination itself
// (the preemptor's): a write of ours for it, queued or in flight, is
// followed by the same node, so that ours never lands last with another.
func (w *nominationWriter) supersede(pod *corev1.Pod, node string) {
	w.mu.Lock()
	_, known := w.wanted[pod.UID]
	w.mu.Unlock()
	if known {
		w.want(pod, node)
	}
}

// nominates reports whether the writer has nominated a pod to a node, or
// is about to.
func (w *nominationWriter) nominates(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wanted[uid].node != ""
}

// forget drops a pod's entry: it is bound or gone.
func (w *nominationWriter) forget(uid types.UID) {
	w.mu.Lock()
	cur, ok := w.wanted[uid]
	delete(w.wanted, uid)
	w.mu.Unlock()
	if ok {
		w.queue.Forget(cur.key)
	}
}

// run writes queued pods with the given number of workers until ctx
// ends, then shuts the queue down: what is still queued is left, as the
// scheduler is stopping.
func (w *nominationWriter) run(ctx context.Context, workers int) {
	queueworkers.Run(ctx, workers, w.queue.ShutDown, w.processNext)
}

// processNext writes one queued pod; false once the queue is shut down.
func (w *nominationWriter) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	w.mu.Lock()
	d, ok := w.wanted[key.uid]
	w.mu.Unlock()
	if !ok || d.key != key || d.written {
		w.queue.Forget(key)
		return true
	}
	logger := klog.FromContext(ctx)
	err := w.write(ctx, d)
	switch {
	case err == nil:
		w.queue.Forget(key)
		w.mu.Lock()
		if cur, ok := w.wanted[key.uid]; ok && cur == d {
			if d.node == "" {
				delete(w.wanted, key.uid) // nothing of ours left to clear
			} else {
				cur.written = true
				w.wanted[key.uid] = cur
			}
		}
		w.mu.Unlock()
	case errors.Is(err, errGone):
		logger.V(4).Info("Pod gone or bound; its nomination is not written", "pod", klog.KRef(key.namespace, key.name))
		w.forget(key.uid)
	default:
		logger.V(2).Info("Cannot write nominated node; retrying", "pod", klog.KRef(key.namespace, key.name), "err", err)
		w.queue.AddRateLimited(key)
	}
	return true
}

// errGone marks a write with no pod to go to.
var errGone = errors.New("pod gone or bound")

// write patches the pod's nominated node. The patch carries the pod's
// UID, as the scheduler's own status patches do, so that it never lands
// on another pod of the same name.
func (w *nominationWriter) write(ctx context.Context, d wanted) error {
	pod, err := w.pods.Pods(d.key.namespace).Get(d.key.name)
	switch {
	case apierrors.IsNotFound(err):
		return errGone
	case err != nil:
		return err
	case pod.UID != d.key.uid, d.node != "" && pod.Spec.NodeName != "":
		return errGone
	}
	var node any
	if d.node != "" {
		node = d.node
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": d.key.uid},
		"status":   map[string]any{"nominatedNodeName": node},
	})
	if err != nil {
		return err
	}
	_, err = w.client().CoreV1().Pods(d.key.namespace).Patch(ctx, d.key.name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return errGone
	}
	return err
}
