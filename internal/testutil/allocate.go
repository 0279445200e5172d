package testutil

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
)

// AllocatorFeatures are the DRA features the 1.37 scheduler enables for
// Strata's devices.
var AllocatorFeatures = structured.Features{ConsumableCapacity: true, DeviceTaints: true, PartitionableDevices: true, PrioritizedList: true}

// EmptyAllocatedState is a cluster where nothing is allocated.
func EmptyAllocatedState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// BenchNodes names n nodes node-0000, node-0001, ...
func BenchNodes(n int) []*v1.Node {
	out := make([]*v1.Node, n)
	for i := range out {
		out[i] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i)}}
	}
	return out
}

// BenchmarkAllocate measures what the scheduler's DynamicResources
// plugin does for one pod: build an allocator over the cluster's slices
// and allocate the claim on every node, each of which must fit it.
func BenchmarkAllocate(b *testing.B, classes ClassLister, slices []*resourceapi.ResourceSlice, nodes []*v1.Node, claim *resourceapi.ResourceClaim) {
	b.Helper()
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	celCache := cel.NewCache(10, cel.Features{EnableConsumableCapacity: true})
	b.ReportAllocs()
	for b.Loop() {
		alloc, err := structured.NewAllocator(ctx, AllocatorFeatures, EmptyAllocatedState(), classes, slices, celCache)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range nodes {
			res, err := alloc.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim})
			if err != nil || len(res) != 1 {
				b.Fatalf("allocate on %s: %v (%d results)", n.Name, err, len(res))
			}
		}
	}
}
