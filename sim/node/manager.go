package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Event reasons, as kubelet emits them.
const (
	ReasonFailedPrepare = "FailedPrepareDynamicResources"
	ReasonStarted       = "Started"
)

const nodeNameIndex = "spec.nodeName"

// Manager runs the simulated nodes of a cluster. One pod informer and one
// work queue serve all nodes, so thousands of nodes cost one watch, not
// thousands.
type Manager struct {
	// PluginClient, if set, gives each node's kubelet plugins their own
	// client (the identity of the plugin pod on that node); nil means the
	// manager's client. Set it before adding nodes.
	PluginClient PluginClientFunc

	client  kubernetes.Interface
	baseDir string
	ctx     context.Context
	cancel  context.CancelFunc
	pods    cache.SharedIndexInformer
	queue   workqueue.TypedRateLimitingInterface[string]
	events  record.EventBroadcaster
	wg      sync.WaitGroup

	mu         sync.Mutex
	nodes      map[string]*Node
	recorders  map[string]record.EventRecorder
	known      map[string]podRecord // pod key -> where it ran, for deletions
	containers map[types.UID]map[string]Container
	// devices are the prepared devices of each running pod, by pod claim.
	devices map[types.UID]map[string][]preparedDevice
}

type podRecord struct {
	node string
	uid  types.UID
}

// NewManager starts the shared pod informer and workers. Nodes are added
// with AddNode. baseDir holds each node's directory; keep it short, unix
// socket paths are limited to 107 bytes.
func NewManager(ctx context.Context, client kubernetes.Interface, baseDir string, workers int) (*Manager, error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	}))
	m := &Manager{
		client:     client,
		baseDir:    baseDir,
		ctx:        ctx,
		cancel:     cancel,
		pods:       factory.Core().V1().Pods().Informer(),
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 5*time.Second)),
		events:     record.NewBroadcaster(record.WithContext(ctx)),
		nodes:      map[string]*Node{},
		recorders:  map[string]record.EventRecorder{},
		known:      map[string]podRecord{},
		containers: map[types.UID]map[string]Container{},
		devices:    map[types.UID]map[string][]preparedDevice{},
	}
	m.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	if err := m.pods.AddIndexers(cache.Indexers{nodeNameIndex: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.Pod).Spec.NodeName}, nil
	}}); err != nil {
		cancel()
		return nil, err
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			m.queue.Add(key)
		}
	}
	if _, err := m.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), m.pods.HasSynced) {
		cancel()
		return nil, errors.New("pod informer did not sync")
	}
	for i := 0; i < workers; i++ {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for m.processNext() {
			}
		}()
	}
	return m, nil
}

// AddNode creates a node and starts its plugins.
func (m *Manager) AddNode(ctx context.Context, spec Spec) (*Node, error) {
	n, err := newNode(ctx, m.client, m.PluginClient, m.events, m.baseDir, spec, m.ctx, func(n *Node, keys []deviceKey) { m.refreshHealth(m.ctx, n, keys) })
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.nodes[spec.Name] = n
	m.recorders[spec.Name] = m.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: spec.Name})
	m.mu.Unlock()
	// Pods may have been bound before the node's agent existed.
	objs, _ := m.pods.GetIndexer().ByIndex(nodeNameIndex, spec.Name)
	for _, obj := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			m.queue.Add(key)
		}
	}
	return n, nil
}

// Node returns a node by name, or nil.
func (m *Manager) Node(name string) *Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodes[name]
}

// Nodes returns all nodes sorted by name.
func (m *Manager) Nodes() []*Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Node, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out
}

// Containers returns what the runtime injected into a running pod's
// containers, by container name; nil for a pod that is not running here.
func (m *Manager) Containers(podUID types.UID) map[string]Container {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.containers[podUID]
}

// Stop stops the workers and every node's plugins.
func (m *Manager) Stop() {
	m.cancel()
	m.queue.ShutDown()
	m.wg.Wait()
	// Each plugin takes up to a second to stop (its health watch waits
	// on NVML events in one-second steps): all nodes stop side by side.
	var wg sync.WaitGroup
	for _, n := range m.Nodes() {
		wg.Go(n.stop)
	}
	wg.Wait()
	m.events.Shutdown()
}

func (m *Manager) processNext() bool {
	key, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(key)
	err := m.sync(m.ctx, key)
	switch {
	case err == nil:
		m.queue.Forget(key)
	case m.ctx.Err() != nil:
	default:
		if !errors.Is(err, errNotReady) {
			utilruntime.HandleErrorWithContext(m.ctx, err, "Pod sync failed", "pod", key)
		}
		m.queue.AddRateLimited(key)
	}
	return true
}

func (m *Manager) sync(ctx context.Context, key string) error {
	obj, exists, err := m.pods.GetIndexer().GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		return m.podGone(ctx, key)
	}
	pod := obj.(*corev1.Pod)
	n := m.Node(pod.Spec.NodeName)
	if n == nil {
		return nil // bound to a node this manager does not simulate
	}
	m.mu.Lock()
	if old, ok := m.known[key]; ok && old.uid != pod.UID {
		// Same name, new pod: the old one is gone.
		m.mu.Unlock()
		if err := m.podGone(ctx, key); err != nil {
			return err
		}
		m.mu.Lock()
	}
	m.known[key] = podRecord{node: n.Spec.Name, uid: pod.UID}
	m.mu.Unlock()
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod), "node", n.Spec.Name)
	ctx = klog.NewContext(ctx, logger)

	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		if err := n.releasePod(ctx, pod.UID); err != nil {
			return err
		}
		m.forget(pod.UID)
		if pod.DeletionTimestamp == nil {
			return nil
		}
		// The containers are gone and the claims released: finish the
		// graceful deletion, as kubelet does.
		err := m.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("finalize deletion: %w", err)
		}
		return nil
	}
	if pod.Status.Phase == corev1.PodRunning && m.Containers(pod.UID) != nil {
		return nil
	}
	containers, devices, err := n.startPod(ctx, pod)
	if err != nil {
		if errors.Is(err, errNotReady) {
			return err
		}
		if m.goingAway(ctx, pod) {
			// The pod was deleted while its claims were being prepared;
			// its deletion is processed next.
			return nil
		}
		m.recorder(n.Spec.Name).Event(pod, corev1.EventTypeWarning, ReasonFailedPrepare, err.Error())
		return err
	}
	m.mu.Lock()
	m.containers[pod.UID] = containers
	m.devices[pod.UID] = devices
	m.mu.Unlock()
	if pod.Status.Phase == corev1.PodRunning {
		return nil
	}
	if err := m.markRunning(ctx, n, pod, devices); err != nil {
		return err
	}
	logger.V(2).Info("Pod running", "claims", len(pod.Spec.ResourceClaims))
	return nil
}

// podGone releases what a pod held after its object disappeared without
// the manager seeing a deletion timestamp (force deletion, for example).
func (m *Manager) podGone(ctx context.Context, key string) error {
	m.mu.Lock()
	rec, ok := m.known[key]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	if n := m.Node(rec.node); n != nil {
		if err := n.releasePod(ctx, rec.uid); err != nil {
			return err
		}
	}
	m.mu.Lock()
	delete(m.known, key)
	delete(m.containers, rec.uid)
	delete(m.devices, rec.uid)
	m.mu.Unlock()
	return nil
}

// goingAway asks the API server whether a pod is being deleted; the
// informer may not know yet.
func (m *Manager) goingAway(ctx context.Context, pod *corev1.Pod) bool {
	cur, err := m.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && (cur.UID != pod.UID || cur.DeletionTimestamp != nil))
}

func (m *Manager) forget(uid types.UID) {
	m.mu.Lock()
	delete(m.containers, uid)
	delete(m.devices, uid)
	m.mu.Unlock()
}

func (m *Manager) recorder(node string) record.EventRecorder {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recorders[node]
}
