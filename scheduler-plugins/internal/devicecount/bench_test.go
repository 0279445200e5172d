package devicecount_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// BenchmarkNodes measures one scheduling cycle's device count over n
// nodes of 8 GPUs, half of them allocated, after the first cycle has
// evaluated the class selectors.
func BenchmarkNodes(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			_, ctx := ktesting.NewTestContext(b)
			objs := classes(b, gpuClass)
			nodes := make([]fwk.NodeInfo, n)
			for i := range n {
				name := fmt.Sprintf("node-%04d", i)
				nodes[i] = dct.NodeInfo(node(name, nil))
				claim := testutil.MakeClaimSpec().Request("gpu", gpuClass, 4).Claim("default", name)
				objs = append(objs, dct.GPUSlice(name, 8), runtime.Object(dct.Allocate(claim, name, 0, 1, 2, 3)))
			}
			c := devicecount.New(dct.DRAManager(ctx, b, objs...), []corev1.ResourceName{gpuName}, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
			cls, err := c.Classes()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Nodes(ctx, nil, cls, nodes, true); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Nodes(ctx, nil, cls, nodes, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
