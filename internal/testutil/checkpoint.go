package testutil

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/strata-sh/strata/drivers/plugin"
)

// CheckpointClaims decodes a kubelet plugin's checkpoint file into the
// claims it records, in UID order, each allocated the devices the plugin
// recorded for it (request, pool, device, share ID, consumed capacity):
// what the node holds, whether or not the claim is still in the API
// server, as GPUOverCommits takes it. Every recorded claim counts, in
// whichever phase: the plugin records a claim's devices before it
// touches them and keeps them until it has undone them.
func CheckpointClaims(raw []byte) ([]resourceapi.ResourceClaim, error) {
	// The envelope's checksum and version are the plugin's to check; a
	// test reads the claims the way the plugin does after that, leniently.
	var file struct {
		Data struct {
			Claims map[types.UID]*plugin.ClaimState `json:"claims"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	out := make([]resourceapi.ResourceClaim, 0, len(file.Data.Claims))
	for _, uid := range slices.Sorted(maps.Keys(file.Data.Claims)) {
		st := file.Data.Claims[uid]
		if st == nil {
			return nil, fmt.Errorf("checkpoint claim %s: empty entry", uid)
		}
		claim := resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: st.Name, UID: uid},
			Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
		}
		for _, d := range st.Devices {
			r, err := allocationResult(d)
			if err != nil {
				return nil, fmt.Errorf("checkpoint claim %s/%s: %w", st.Namespace, st.Name, err)
			}
			claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, r)
		}
		out = append(out, claim)
	}
	return out, nil
}

// allocationResult is the allocation a prepared device was recorded with.
func allocationResult(d plugin.PreparedDevice) (resourceapi.DeviceRequestAllocationResult, error) {
	r := resourceapi.DeviceRequestAllocationResult{Request: d.Request, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID}
	if d.AdminAccess {
		r.AdminAccess = &d.AdminAccess
	}
	for name, v := range d.ConsumedCapacity {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return r, fmt.Errorf("device %s/%s: consumed %s %q: %w", d.Pool, d.Device, name, v, err)
		}
		if r.ConsumedCapacity == nil {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
		}
		r.ConsumedCapacity[name] = q
	}
	return r, nil
}
