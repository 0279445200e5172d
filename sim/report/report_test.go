package report

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWriteTable(t *testing.T) {
	r := &Report{
		Cluster: "demo",
		Summary: Summary{Nodes: 2, Pods: 2, Running: 1, Pending: 1, Claims: 2, AllocatedClaims: 1, PublishedDevices: 16, AllocatedDevices: 2},
		Pods: []Pod{
			{Namespace: "default", Name: "train", Node: "n-0", Phase: "Running", Claims: []PodClaim{
				{Name: "gpus", Devices: []Device{{Driver: "nvidia.strata.sh", Pool: "n-0", Device: "gpu-0"}, {Driver: "nvidia.strata.sh", Pool: "n-0", Device: "gpu-1"}}},
			}},
			{Namespace: "default", Name: "big", Phase: "Pending", Reason: "Unschedulable", Message: "0/2 nodes are available:\n 2 cannot allocate all claims.",
				Claims: []PodClaim{{Name: "gpu"}}},
		},
	}
	var out bytes.Buffer
	if err := r.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	want := `Cluster demo: 2 nodes, 2 pods (1 running, 1 pending, 0 failed), 1/2 claims allocated, 2/16 devices allocated

NAMESPACE  POD    NODE    PHASE    CLAIM  DEVICES
default    train  n-0     Running  gpus   nvidia.strata.sh/n-0/gpu-0, nvidia.strata.sh/n-0/gpu-1
default    big    <none>  Pending  gpu    -

Not running:
  default/big: Unschedulable: 0/2 nodes are available: 2 cannot allocate all claims.
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestMatchedAttributes(t *testing.T) {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	attrs := attributeIndex{
		"rdma.strata.sh/n-0/nic-a":   {"topology.strata.sh/pcieSwitch": str("0000:17:00.0"), "linkLayer": str("InfiniBand")},
		"nvidia.strata.sh/n-0/gpu-0": {"topology.strata.sh/pcieSwitch": str("0000:17:00.0")},
	}
	sw := resourceapi.FullyQualifiedName("topology.strata.sh/pcieSwitch")
	numa := resourceapi.FullyQualifiedName("resource.kubernetes.io/numaNode")
	link := resourceapi.FullyQualifiedName("rdma.strata.sh/linkLayer")
	c := &resourceapi.ResourceClaim{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Constraints: []resourceapi.DeviceConstraint{
			{Requests: []string{"nic/same-switch", "gpu"}, MatchAttribute: &sw},
			// The rung not chosen binds nothing and is not shown.
			{Requests: []string{"nic/same-numa"}, MatchAttribute: &numa},
			// A driver's own attribute, published without its domain.
			{Requests: []string{"nic"}, MatchAttribute: &link},
		}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "nic/same-switch", Driver: "rdma.strata.sh", Pool: "n-0", Device: "nic-a"},
			{Request: "gpu", Driver: "nvidia.strata.sh", Pool: "n-0", Device: "gpu-0"},
		}}}},
	}
	want := []string{"topology.strata.sh/pcieSwitch=0000:17:00.0", "rdma.strata.sh/linkLayer=InfiniBand"}
	if diff := cmp.Diff(want, matched(c, attrs)); diff != "" {
		t.Errorf("matched (-want +got):\n%s", diff)
	}
	if got := matched(&resourceapi.ResourceClaim{Spec: c.Spec}, attrs); got != nil {
		t.Errorf("unallocated claim matched %v", got)
	}

	r := &Report{Pods: []Pod{{Namespace: "default", Name: "w", Node: "n-0", Phase: "Running", Claims: []PodClaim{{
		Name:    "gpu-nic",
		Devices: []Device{{Driver: "rdma.strata.sh", Pool: "n-0", Device: "nic-a"}, {Driver: "nvidia.strata.sh", Pool: "n-0", Device: "gpu-0"}},
		Matched: want[:1],
	}}}}}
	var out bytes.Buffer
	if err := r.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if line := "rdma.strata.sh/n-0/nic-a, nvidia.strata.sh/n-0/gpu-0 (topology.strata.sh/pcieSwitch=0000:17:00.0)"; !bytes.Contains(out.Bytes(), []byte(line)) {
		t.Errorf("table does not show the matched switch:\n%s", out.String())
	}
}

// Of two events in the same second, the one written last is the newest,
// whatever order the list gives them in.
func TestLastEventsBreaksTiesByResourceVersion(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	ev := func(reason, rv string) corev1.Event {
		return corev1.Event{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}, InvolvedObject: corev1.ObjectReference{UID: "pod"}, Reason: reason, LastTimestamp: at}
	}
	for _, order := range [][]corev1.Event{
		{ev("FailedResourceClaimCreation", "10"), ev("FailedPrepareDynamicResources", "12")},
		{ev("FailedPrepareDynamicResources", "12"), ev("FailedResourceClaimCreation", "10")},
	} {
		if got := lastEvents(order)["pod"].Reason; got != "FailedPrepareDynamicResources" {
			t.Errorf("newest of %s/%s: %s, want FailedPrepareDynamicResources", order[0].Reason, order[1].Reason, got)
		}
	}
}
