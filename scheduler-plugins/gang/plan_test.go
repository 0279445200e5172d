package gang

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
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
