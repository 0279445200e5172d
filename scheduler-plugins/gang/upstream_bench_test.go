package gang

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/strata-sh/strata/internal/testutil"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// BenchmarkGeneratePlacements measures one PlacementGenerate call for a
// group of four members with a 2-GPU claim each, that must share a rack
// of 16 nodes, on n nodes of 8 GPUs (every other node half allocated):
// the call the in-tree pod-group cycle makes once per group attempt.
func BenchmarkGeneratePlacements(b *testing.B) {
	const gpuClass = "nvidia-gpu.strata.sh"
	for _, n := range []int{500, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			ctx := context.Background()
			class := testutil.StrataClasses(b)[gpuClass].DeepCopy()
			class.ResourceVersion = "1"
			objs := []runtime.Object{class}
			nodes := make([]fwk.NodeInfo, n)
			for i := range n {
				name := fmt.Sprintf("node-%04d", i)
				node := dct.Node(name, map[corev1.ResourceName]string{corev1.ResourceCPU: "224", corev1.ResourceMemory: "2Ti", corev1.ResourcePods: "110"})
				node.Labels = map[string]string{rackLabel: fmt.Sprintf("rack-%03d", i/16)}
				nodes[i] = framework.NewNodeInfo()
				nodes[i].SetNode(node)
				slice := dct.GPUSlice(name, 8)
				slice.UID = types.UID(slice.Name)
				objs = append(objs, slice)
				if i%2 == 1 {
					held := testutil.MakeClaimSpec().Request("gpus", gpuClass, 4).Claim("default", name+"-held")
					objs = append(objs, dct.Allocate(held, name, 0, 1, 2, 3))
				}
			}
			var pods []*corev1.Pod
			for i := range 4 {
				claim := testutil.MakeClaimSpec().Request("gpus", gpuClass, 2).Claim("default", fmt.Sprintf("job-%d-gpus", i))
				claim.UID = types.UID("uid-" + claim.Name)
				objs = append(objs, claim)
				pod := testutil.MakePod(fmt.Sprintf("job-%d", i)).Req("8", "8Gi").Claim("gpus", claim.Name).Obj()
				pod.UID = types.UID("uid-" + pod.Name)
				pods = append(pods, pod)
			}
			p, _ := newTestPlugin(b, nil)
			p.capacity = newCapacityEstimator(dct.DRAManager(ctx, b, objs...), feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
			group, parent := testGroup{pods: pods}, &fwk.Placement{Nodes: nodes}
			b.ReportAllocs()
			for b.Loop() {
				res, st := p.GeneratePlacements(ctx, framework.NewCycleState(), group, parent)
				if !st.IsSuccess() || len(res.Placements) == 0 {
					b.Fatalf("GeneratePlacements: %v, %d placements", st, len(res.Placements))
				}
			}
		})
	}
}
