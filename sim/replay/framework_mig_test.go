package replay

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/deployments"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/internal/nvidiapreset"
)

// migCluster is two DGX A100 nodes whose NVIDIA plugin runs in dynamic
// MIG mode: every placement of every profile is a device drawing on its
// GPU's counters.
func migCluster(t *testing.T, names ...string) *Cluster {
	t.Helper()
	ctx := testContext(t)
	inv, err := nvidiapreset.Discover(ctx, "nvidia-dgx-a100", nvidia.MIGDynamic)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Models: map[string]GPUModel{}}
	if c.Classes, err = deployments.DeviceClassObjects(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		c.Nodes = append(c.Nodes, nodeObject(TraceNode{Name: n, CPU: 256000, Memory: 1 << 20, GPUs: 8, Model: "A100"}))
		s, err := nvidiapreset.Slices(n, inv)
		if err != nil {
			t.Fatal(err)
		}
		c.Slices = append(c.Slices, s...)
		c.TotalMilli += 8000
	}
	return c
}

// migPodClaim is a pod with a claim for count devices of a class, those
// of a MIG profile if one is named, and the claim, allocated to a device
// if one is named.
func migPodClaim(name, class, profile string, count int64, node, device string) (*corev1.Pod, *resourceapi.ResourceClaim) {
	req := resourceapi.DeviceRequest{Name: claimRequest, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	if profile != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.attributes["nvidia.strata.sh"].profile == %q`, profile),
		}}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: replayNamespace, UID: types.UID("claim-" + name), ResourceVersion: "1"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}
	if device != "" {
		claim.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: claimRequest, Driver: nvidia.DriverName, Pool: node, Device: device,
			}}},
			NodeSelector: nodeSelector(node),
		}
	}
	pod := podObject(0, TracePod{CPU: 4000, Memory: 4096, GPUs: 1})
	pod.Name, pod.UID = name, types.UID("pod-"+name)
	pod.Spec.ResourceClaims[0].ResourceClaimName = ptr.To(name)
	return pod, claim
}

func nodeSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
	}}}}}
}

// Through kube-scheduler's framework and the DRA allocator, on nodes
// that publish MIG placements: with a GPU of node b already holding a 1g
// instance, Strata's profile puts further 1g instances beside it, even
// though node a comes first by name, and node a keeps seven whole GPUs
// for a pod that needs them. A whole-GPU pod scored first puts whole GPUs
// in the mix the measure expects.
func TestFrameworkPacksMIGInstances(t *testing.T) {
	c := migCluster(t, "a", "b")
	device, err := nvidiapreset.PlacementDevice(c.Slices, "b", 0, "1g.5gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, held := migPodClaim("held", "nvidia-mig.strata.sh", "1g.5gb", 1, "b", device)
	type step struct {
		pod   *corev1.Pod
		claim *resourceapi.ResourceClaim
	}
	var steps []step
	add := func(name, class, profile string, count int64) {
		p, c := migPodClaim(name, class, profile, count, "", "")
		steps = append(steps, step{p, c})
	}
	add("whole", "nvidia-gpu.strata.sh", "", 1)
	for i := range 6 {
		add(fmt.Sprintf("small-%d", i), "nvidia-mig.strata.sh", "1g.5gb", 1)
	}
	add("seven", "nvidia-gpu.strata.sh", "", 7)
	claims := []*resourceapi.ResourceClaim{held}
	for _, s := range steps {
		claims = append(claims, s.claim)
	}
	ctx := testContext(t)
	s, err := newScheduler(ctx, c, loadProfile(t, ProfileStrata), claims, 2, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	placed := map[string]string{}
	for _, st := range steps {
		node, _, err := s.schedule(ctx, st.pod)
		if err != nil {
			t.Fatalf("pod %s: %v", st.pod.Name, err)
		}
		placed[st.pod.Name] = node
	}
	t.Logf("placements: %v", placed)
	for i := range 6 {
		if name := fmt.Sprintf("small-%d", i); placed[name] != "b" {
			t.Errorf("pod %s placed on %q, want b, beside the 1g instance there", name, placed[name])
		}
	}
	if placed["seven"] == "" {
		t.Errorf("the seven-GPU pod found no node: the small instances broke whole GPUs on both")
	}
	// The instances are where the claims say: seven 1g instances on
	// one GPU of b (the held one and six more), none on a.
	for _, st := range steps {
		claim, err := s.dra.ResourceClaims().Get(replayNamespace, st.claim.Name)
		if err != nil {
			t.Fatal(err)
		}
		if placed[st.pod.Name] != "" && claim.Status.Allocation == nil {
			t.Errorf("pod %s was placed but its claim is not allocated", st.pod.Name)
		}
	}
}
