package gang

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// noTopology is a cluster-scoped lister holding no ClusterNetworkTopology.
type noTopology struct{ cache.GenericLister }

func (noTopology) Get(name string) (runtime.Object, error) { return emptyNS{}.Get(name) }

// TestClaimPendingIsNotAnsweredFromTheLastFailure: members whose claims the
// ResourceClaim controller has not created yet fail their plan. The event
// that ends the wait is a member's own status naming its claim, which
// moves no generation of the snapshot, so the next member must compute
// the plan again rather than get the recorded failure: answered from it,
// the gang waited for the queue's periodic flush (minutes).
func TestClaimPendingIsNotAnsweredFromTheLastFailure(t *testing.T) {
	pods := annotatedGang("job", 2, "30s")
	for _, pod := range pods {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("job-gpus")}}
	}
	p, _ := newTestPlugin(t, pods)
	p.src.topologies = noTopology{}
	p.capacity = &capacityEstimator{}
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	nodes := []fwk.NodeInfo{ni}

	for i, pod := range pods {
		state := framework.NewCycleState()
		_, st := p.PreFilter(context.Background(), state, pod, nodes)
		if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), `waiting for the ResourceClaim of "gpus" to be created`) {
			t.Fatalf("member %d: PreFilter = %v, want Unschedulable waiting for the claim", i, st)
		}
		if _, err := state.Read(failFastStateKey); err == nil {
			t.Errorf("member %d was answered from the gang's last failure instead of looking at its claims again", i)
		}
	}
	if why := p.lastFailure("default/job").msg; !strings.Contains(why, "waiting for the ResourceClaim") {
		t.Errorf("the failure PostFilter reports is %q, want the claim wait", why)
	}
}

// TestRequeueEventEndsFailFast: while nothing changed, the members after
// the first are answered from the gang's failure; an event that queues a
// member again (its PodGroup edited, here) makes the next one look again.
func TestRequeueEventEndsFailFast(t *testing.T) {
	pods := annotatedGang("job", 2, "30s")
	p, _ := newTestPlugin(t, pods)
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	nodes := []fwk.NodeInfo{ni}
	p.failures["default/job"] = failure{msg: "no room", gen: p.snapshotGeneration(nodes), at: time.Now()}
	if _, ok := p.recentFailure("default/job", nodes); !ok {
		t.Fatal("a failure on the same snapshot moments ago is not reused")
	}
	events, err := p.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var hint fwk.QueueingHintFn
	for _, e := range events {
		if e.Event.Resource == podGroupEvents {
			hint = e.QueueingHintFn
		}
	}
	logger, _ := ktesting.NewTestContext(t)
	pg := func(gen int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetNamespace("default")
		u.SetName("job")
		u.SetGeneration(gen)
		return u
	}
	if h, _ := hint(logger, pods[0], pg(1), pg(1)); h != fwk.QueueSkip {
		t.Fatalf("a PodGroup status write queued the member (%v)", h)
	}
	if _, ok := p.recentFailure("default/job", nodes); !ok {
		t.Error("an event that queued nobody ended the fail-fast answer")
	}
	if h, _ := hint(logger, pods[0], pg(1), pg(2)); h != fwk.Queue {
		t.Fatalf("an edited PodGroup did not queue the member (%v)", h)
	}
	if _, ok := p.recentFailure("default/job", nodes); ok {
		t.Error("the member queued by the PodGroup edit is answered from the failure before it")
	}
}
