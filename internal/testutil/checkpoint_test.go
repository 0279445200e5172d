package testutil

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// checkpointWith wraps claim entries in the envelope of a simulated H100
// node's NVIDIA checkpoint, as the plugin wrote it (checksum not
// recomputed: the decoder leaves it to the plugin).
func checkpointWith(claims string) []byte {
	return []byte(`{"version":"plugin.strata.sh/checkpoint/v1","checksum":"7c0f4ceba3d5bdb9a88cf128e0741e1cf01f221c2f18e26c29ff3d87bf09c5fc",` +
		`"data":{"bootID":"9838e8b1-087f-5f01-8611-b29eda7c7dbb","claims":{` + claims + `}}}`)
}

// Entries as the NVIDIA plugin records them: a whole GPU (prepared), a
// MIG slice (prepare started, no capacity consumed).
const (
	wholeGPU5 = `"0baedb20-b33e-4d2c-ae09-5589ee849e18":{"namespace":"default","name":"eight-pairs-4-gpu-nic-qzrr2","uid":"0baedb20-b33e-4d2c-ae09-5589ee849e18","phase":"PrepareCompleted",` +
		`"devices":[{"request":"gpu","pool":"h100-0","device":"gpu-5","shareID":"a147847f-11c2-468b-ba5b-f62f1c5ab941",` +
		`"edits":{"deviceNodes":[{"path":"/dev/nvidia5","hostPath":"/tmp/n/h100-0/dev/nvidia5","type":"c","major":195,"minor":5}]},"state":{"kind":"gpu"},"consumedCapacity":{"cores":"0","memory":"80Gi"}}]}`
	migOnGPU5 = `"9083cdd6-7d55-4196-ab50-08bf446697e6":{"namespace":"default","name":"mig-1","uid":"9083cdd6-7d55-4196-ab50-08bf446697e6","phase":"PrepareStarted",` +
		`"devices":[{"request":"mig","pool":"h100-0","device":"gpu-5-mig-1g10gb-0","edits":{}}]}`
)

func TestCheckpointClaims(t *testing.T) {
	whole := resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "eight-pairs-4-gpu-nic-qzrr2", UID: "0baedb20-b33e-4d2c-ae09-5589ee849e18"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Pool: "h100-0", Device: "gpu-5", ShareID: ptr.To(types.UID("a147847f-11c2-468b-ba5b-f62f1c5ab941")),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("0"), "memory": resource.MustParse("80Gi")},
		}}}}},
	}
	mig := resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mig-1", UID: "9083cdd6-7d55-4196-ab50-08bf446697e6"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "mig", Pool: "h100-0", Device: "gpu-5-mig-1g10gb-0",
		}}}}},
	}
	tests := []struct {
		name    string
		raw     []byte
		want    []resourceapi.ResourceClaim
		wantErr string
	}{
		{name: "no claims", raw: checkpointWith(""), want: []resourceapi.ResourceClaim{}},
		{name: "claims in UID order, any phase", raw: checkpointWith(migOnGPU5 + "," + wholeGPU5), want: []resourceapi.ResourceClaim{whole, mig}},
		{name: "not JSON", raw: []byte("{"), wantErr: "decode checkpoint"},
		{name: "bad quantity", raw: checkpointWith(strings.Replace(wholeGPU5, `"80Gi"`, `"lots"`, 1)), wantErr: `consumed memory "lots"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckpointClaims(tc.raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
		})
	}
}

// A whole GPU and a MIG slice of it, both recorded by the node, are an
// over-commit whatever the API server still holds.
func TestCheckpointClaimsOverCommit(t *testing.T) {
	claims, err := CheckpointClaims(checkpointWith(wholeGPU5 + "," + migOnGPU5))
	if err != nil {
		t.Fatal(err)
	}
	layout := GPULayout{
		"h100-0/gpu-5":              {GPU: "h100-0/gpu-5", Memory: 80 << 30},
		"h100-0/gpu-5-mig-1g10gb-0": {GPU: "h100-0/gpu-5", MIG: true, Start: 0, Size: 1},
	}
	want := []string{"h100-0/gpu-5 double-allocated: 1 claims on the GPU (0 cores, 85899345920 of 85899345920 bytes), 1 MIG slices"}
	if diff := cmp.Diff(want, GPUOverCommits(layout, claims)); diff != "" {
		t.Errorf("over-commits (-want +got):\n%s", diff)
	}
}
