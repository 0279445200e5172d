package jobpreempt

import (
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
)

// gangLabel names a test pod's gang (in its namespace).
const gangLabel = "gang"

// fakeHost is the gang plugin as job-level preemption sees it: pods in an
// index (the informer), a snapshot of the bound ones, claims, a fake API
// and a record of the gangs sent round again.
type fakeHost struct {
	pods   cache.Indexer
	claims []*resourceapi.ResourceClaim
	cs     *fake.Clientset

	mu      sync.Mutex
	snap    fwk.SharedLister
	retried []string
}

func (h *fakeHost) Members(gang string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range h.pods.List() {
		if pod := obj.(*corev1.Pod); h.GangOf(pod) == gang {
			out = append(out, pod)
		}
	}
	return out
}

func (h *fakeHost) GangOf(pod *corev1.Pod) string {
	if g := pod.Labels[gangLabel]; g != "" {
		return pod.Namespace + "/" + g
	}
	return ""
}

func (h *fakeHost) Snapshot() fwk.SharedLister {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snap
}

func (h *fakeHost) Claims() fwk.ResourceClaimTracker { return claimsTracker{claims: h.claims} }

func (h *fakeHost) Client() kubernetes.Interface { return h.cs }

func (h *fakeHost) Retry(_ klog.Logger, gang string) {
	h.mu.Lock()
	h.retried = append(h.retried, gang)
	h.mu.Unlock()
}

func (h *fakeHost) retries() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.retried)
}

// observe shows the scheduler what the fake API holds, as its informer
// and next snapshot would: pods deleted there leave the index and the
// snapshot.
func (h *fakeHost) observe(t *testing.T) {
	t.Helper()
	var bound []*corev1.Pod
	var nodes []*corev1.Node
	seen := map[string]bool{}
	for _, obj := range h.pods.List() {
		pod := obj.(*corev1.Pod)
		got, err := h.cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), pod.Namespace, pod.Name)
		if err != nil {
			if err := h.pods.Delete(pod); err != nil {
				t.Fatal(err)
			}
			continue
		}
		pod = got.(*corev1.Pod)
		if err := h.pods.Update(pod); err != nil {
			t.Fatal(err)
		}
		if n := pod.Spec.NodeName; n != "" {
			bound = append(bound, pod)
			if !seen[n] {
				seen[n] = true
				nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
			}
		}
	}
	h.mu.Lock()
	h.snap = schedcache.NewSnapshot(bound, nodes)
	h.mu.Unlock()
}

type claimsTracker struct {
	fwk.ResourceClaimTracker
	claims []*resourceapi.ResourceClaim
}

func (t claimsTracker) List() ([]*resourceapi.ResourceClaim, error) { return t.claims, nil }

func (t claimsTracker) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	for _, c := range t.claims {
		if c.Namespace == namespace && c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("claim %s/%s not found", namespace, name)
}

// newTestPreemptor returns a Preemptor over a fake host holding the
// pods, with nothing to restore and writers not started.
func newTestPreemptor(t *testing.T, claims []*resourceapi.ResourceClaim, pods ...*corev1.Pod) (*Preemptor, *fakeHost) {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	var objs []runtime.Object
	for _, pod := range pods {
		if err := idx.Add(pod); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, pod)
	}
	h := &fakeHost{pods: idx, claims: claims, cs: fake.NewClientset(objs...)}
	h.observe(t)
	j := New(Config{Host: h, Pods: corelisters.NewPodLister(idx), Plugin: "StrataGang", Preemptible: "preemptible"})
	j.rebuild.Do(func() {})
	return j, h
}

// pod makes a pod; node "" leaves it pending.
func pod(name, gang, node string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{NodeName: node}}
	if gang != "" {
		p.Labels = map[string]string{gangLabel: gang}
	}
	return p
}
