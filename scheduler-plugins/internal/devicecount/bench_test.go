package devicecount_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

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

// BenchmarkAllocatedState reads the allocated state of n nodes of 8
// GPUs after one claim's allocation went in flight or was given up (so
// that each read finds a change, as between two scheduling cycles):
// through the tracker, and as the DRA manager's GatherAllocatedState
// copies it. With shares, half of each node's GPUs are held in two
// shares each (the tracker walks the claims); without, each GPU is held
// whole by its own claim (the tracker copies).
func BenchmarkAllocatedState(b *testing.B) {
	for _, shares := range []bool{true, false} {
		for _, n := range []int{100, 1000} {
			benchmarkAllocatedState(b, n, shares)
		}
	}
}

func benchmarkAllocatedState(b *testing.B, n int, shares bool) {
	_, ctx := ktesting.NewTestContext(b)
	var objs []runtime.Object
	for i := range n {
		name := fmt.Sprintf("node-%04d", i)
		objs = append(objs, dct.GPUSlice(name, 8))
		for gpu := range 4 {
			for half := range 2 {
				claim := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", fmt.Sprintf("%s-%d-%d", name, gpu, half))
				if !shares {
					objs = append(objs, dct.Allocate(claim, name, 2*gpu+half))
					continue
				}
				claim = dct.Allocate(claim, name, gpu)
				r := &claim.Status.Allocation.Devices.Results[0]
				r.ShareID = ptr.To(types.UID(claim.Name))
				r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("50"), "memory": resource.MustParse("8Gi")}
				objs = append(objs, claim)
			}
		}
	}
	pending := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "pending")
	pending.UID = "pending"
	objs = append(objs, pending)
	m := dct.DRAManager(ctx, b, objs...)
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	inFlight := dct.Allocate(pending, "node-0000", 7)
	toggle := func(i int) {
		if i%2 == 0 {
			if err := m.ResourceClaims().SignalClaimPendingAllocation(pending.UID, inFlight); err != nil {
				b.Fatal(err)
			}
		} else {
			m.ResourceClaims().MaybeRemoveClaimPendingAllocation(pending.UID, true)
		}
	}
	name := fmt.Sprintf("shares=%v/nodes=%d", shares, n)
	b.Run(name+"/tracker", func(b *testing.B) {
		tracker := devicecount.NewAllocated(m, fts.EnableDRAConsumableCapacity)
		if _, err := tracker.State(); err != nil {
			b.Fatal(err)
		}
		if devicecount.Walking(tracker) != shares {
			b.Fatalf("the tracker walks the claims: %v, want %v", devicecount.Walking(tracker), shares)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			toggle(i)
			i++
			if _, err := tracker.State(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(name+"/GatherAllocatedState", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			toggle(i)
			i++
			if _, err := m.ResourceClaims().GatherAllocatedState(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
