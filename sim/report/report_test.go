package report

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
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
