package gang

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// TestCapacitiesCountDevicesOfSharedPools: devices in a pool not bound
// to one node (network-attached, offered to all nodes or to those a node
// selector picks) count on the nodes that can use them, whether or not
// a node has slices of its own, and a node the selector leaves out gets
// none of them.
func TestCapacitiesCountDevicesOfSharedPools(t *testing.T) {
	const gpuClass = "nvidia-gpu.strata.sh"
	tests := map[string]struct {
		shared func(*resourceapi.ResourceSlice)
		want   map[string]int
	}{
		"offered to all nodes": {
			shared: func(s *resourceapi.ResourceSlice) { s.Spec.AllNodes = ptr.To(true) },
			want:   map[string]int{"local": 4, "plain": 4, "fabric": 4},
		},
		"offered by a node selector": {
			shared: func(s *resourceapi.ResourceSlice) {
				s.Spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "fabric", Operator: corev1.NodeSelectorOpIn, Values: []string{"yes"}}},
				}}}
			},
			want: map[string]int{"local": 2, "plain": 0, "fabric": 4},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			class := testutil.StrataClasses(t)[gpuClass].DeepCopy()
			class.ResourceVersion = "1"
			local := dct.GPUSlice("local", 2)
			local.UID = "local"
			shared := dct.GPUSlice("pooled", 4)
			shared.UID, shared.Spec.NodeName = "pooled", nil
			tc.shared(shared)
			claim := testutil.MakeClaimSpec().Request("gpus", gpuClass, 1).Claim("default", "job-0-gpus")
			claim.UID = "uid-job-0-gpus"
			pod := testutil.MakePod("job-0").Req("1", "1Gi").Claim("gpus", claim.Name).Obj()
			pod.UID = types.UID("uid-job-0")

			var nodes []fwk.NodeInfo
			for _, n := range []string{"local", "plain", "fabric"} {
				node := dct.Node(n, map[corev1.ResourceName]string{corev1.ResourceCPU: "64", corev1.ResourceMemory: "256Gi", corev1.ResourcePods: "110"})
				if n == "fabric" {
					node.Labels = map[string]string{"fabric": "yes"}
				}
				ni := framework.NewNodeInfo()
				ni.SetNode(node)
				nodes = append(nodes, ni)
			}
			e := newCapacityEstimator(dct.DRAManager(ctx, t, []runtime.Object{class, local, shared, claim}...), feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
			got, _, err := e.capacities(ctx, pod, 4, nodes, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for node, want := range tc.want {
				if got[node] != want {
					t.Errorf("%s takes %d members, want %d (all: %v)", node, got[node], want, got)
				}
			}
		})
	}
}
