// Package devicecounttest builds the DRA objects and the scheduler's own
// DRA manager (over a fake clientset) that the device-counting plugins'
// tests run against.
package devicecounttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
)

// GPUDriver is the driver of the devices GPUSlice publishes; Strata's
// nvidia-gpu.strata.sh class selects them.
const GPUDriver = "nvidia.strata.sh"

// DRAManager starts kube-scheduler's DRA manager on a fake clientset
// holding objects, and returns once it sees every ResourceSlice, every
// claim and every allocated device of the claims among them.
func DRAManager(ctx context.Context, tb testing.TB, objects ...runtime.Object) fwk.SharedDRAManager {
	tb.Helper()
	m, _ := DRAManagerAndClient(ctx, tb, objects...)
	return m
}

// DRAManagerAndClient is DRAManager, and also returns the clientset, for
// tests that change the objects afterwards.
func DRAManagerAndClient(ctx context.Context, tb testing.TB, objects ...runtime.Object) (fwk.SharedDRAManager, *fake.Clientset) {
	tb.Helper()
	m, client, _ := DRA(ctx, tb, objects...)
	return m, client
}

// DRA is DRAManagerAndClient, and also returns the informer factory the
// manager reads, started, for plugins that watch its informers.
func DRA(ctx context.Context, tb testing.TB, objects ...runtime.Object) (fwk.SharedDRAManager, *fake.Clientset, informers.SharedInformerFactory) {
	tb.Helper()
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	slices, err := tracker.StartTracker(ctx, tracker.Options{SliceInformer: factory.Resource().V1().ResourceSlices(), KubeClient: client})
	if err != nil {
		tb.Fatal(err)
	}
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), factory.Resource().V1().ResourceClaims().Informer(), "resource claim", "", nil)
	m := dynamicresources.NewDRAManager(ctx, claims, slices, factory)
	factory.Start(ctx.Done())
	tb.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	factory.WaitForCacheSync(ctx.Done())

	wantSlices, wantDevices := 0, 0
	for _, obj := range objects {
		switch o := obj.(type) {
		case *resourceapi.ResourceSlice:
			wantSlices++
		case *resourceapi.ResourceClaim:
			if o.Status.Allocation != nil {
				wantDevices += len(o.Status.Allocation.Devices.Results)
			}
		}
	}
	// Informer handlers run after the caches report synced.
	err = wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s, err := m.ResourceSlices().ListWithDeviceTaintRules()
		if err != nil || len(s) != wantSlices {
			return false, nil
		}
		for _, obj := range objects {
			// Every claim, allocated or not, must be readable.
			if c, ok := obj.(*resourceapi.ResourceClaim); ok {
				if _, err := m.ResourceClaims().Get(c.Namespace, c.Name); err != nil {
					return false, nil
				}
			}
		}
		state, err := m.ResourceClaims().GatherAllocatedState()
		return err == nil && state.AllocatedDevices.Len()+state.AllocatedSharedDeviceIDs.Len() == wantDevices, nil
	})
	if err != nil {
		tb.Fatalf("DRA manager did not see %d slices and %d allocated devices: %v", wantSlices, wantDevices, err)
	}
	return m, client, factory
}

// GPUSlice returns a node-local ResourceSlice with n GPUs named
// <node>-gpu-<i>, in a pool named after the node.
func GPUSlice(node string, n int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus", ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   GPUDriver,
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
		},
	}
	for i := range n {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: GPUName(node, i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": {StringValue: ptr.To("gpu")},
			},
		})
	}
	return s
}

// GPUName names the i-th GPU of GPUSlice(node, ...).
func GPUName(node string, i int) string { return fmt.Sprintf("%s-gpu-%d", node, i) }

// Indexes returns 0, 1, ..., n-1.
func Indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Allocate returns claim allocated the GPUs of node from GPUSlice with
// the given indexes, all for its first request.
func Allocate(claim *resourceapi.ResourceClaim, node string, gpus ...int) *resourceapi.ResourceClaim {
	claim = claim.DeepCopy()
	if claim.UID == "" {
		claim.UID = types.UID(claim.Namespace + "/" + claim.Name)
	}
	alloc := &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
	for _, i := range gpus {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: claim.Spec.Devices.Requests[0].Name, Driver: GPUDriver, Pool: node, Device: GPUName(node, i),
		})
	}
	claim.Status.Allocation = alloc
	return claim
}

// NodeInfo returns the scheduler's view of a node with pods on it.
func NodeInfo(node *corev1.Node, pods ...*corev1.Pod) fwk.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

// Node returns a node with the given allocatable resources.
func Node(name string, allocatable map[corev1.ResourceName]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{}}}
	for r, q := range allocatable {
		n.Status.Allocatable[r] = resource.MustParse(q)
	}
	n.Status.Capacity = n.Status.Allocatable.DeepCopy()
	return n
}

// Pod returns a pod whose one container requests the given resources.
func Pod(name string, requests map[corev1.ResourceName]string) *corev1.Pod {
	p := testutil.MakePod(name).Obj()
	res := &p.Spec.Containers[0].Resources
	for r, q := range requests {
		if res.Requests == nil {
			res.Requests = corev1.ResourceList{}
		}
		res.Requests[r] = resource.MustParse(q)
	}
	return p
}
