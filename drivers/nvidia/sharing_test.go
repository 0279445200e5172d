package nvidia

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

func sharingConfig(sharing string) json.RawMessage {
	return json.RawMessage(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":` + sharing + `}`)
}

// effective is what the plugin core hands a device for these configs,
// lowest precedence first.
func effective(t *testing.T, raws ...json.RawMessage) any {
	t.Helper()
	h := configHandler{}
	var decoded []any
	for _, raw := range raws {
		v, err := h.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		decoded = append(decoded, v)
	}
	cfg, err := h.Effective(decoded)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func claimRequest(uid string, devices ...plugin.AllocatedDevice) *plugin.PrepareRequest {
	return &plugin.PrepareRequest{
		Claim:   &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: k8stypes.UID("uid-" + uid)}},
		Devices: devices,
	}
}

// TestMixedStrategiesInOneClaim is NVIDIA's demo of one claim with a
// time-sliced GPU and an MPS GPU: both are prepared, each device carries
// only its own limits, the time slice is set on its GPU and both
// mechanisms are undone at unprepare.
func TestMixedStrategiesInOneClaim(t *testing.T) {
	ctx, b, srv := discovered(t, hardware.DGXH100())
	slicesSet := b.cfg.TimeSlice.(*nvmlmock.TimeSlices)
	req := claimRequest("mixed",
		plugin.AllocatedDevice{Request: "ts-gpu", Device: "gpu-0", Config: effective(t, sharingConfig(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`))},
		plugin.AllocatedDevice{Request: "mps-gpu", Device: "gpu-1", Config: effective(t, sharingConfig(`{"strategy":"MPS","mps":{"activeThreadPercentage":50,"pinnedMemoryLimit":"10Gi"}}`))},
	)
	if err := b.Validate(ctx, req); err != nil {
		t.Fatal(err)
	}
	resp, err := b.Prepare(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := slicesSet.Get(srv.Device(0).UUID); got != 3 {
		t.Errorf("time slice of GPU 0 = %d, want 3 (Long)", got)
	}
	if srv.ComputeMode(1) != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS || srv.ComputeMode(0) != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("compute modes %v/%v, want default for the time-sliced GPU and exclusive-process for MPS", srv.ComputeMode(0), srv.ComputeMode(1))
	}
	if env := resp.Devices[0].Edits.Env; len(env) != 0 {
		t.Errorf("time-sliced device env %v, want none", env)
	}
	if env := resp.Devices[1].Edits.Env; !slices.Contains(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50") || !slices.Contains(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M") {
		t.Errorf("MPS device env %v", env)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRefOf(req.Claim), resp.Devices); err != nil {
		t.Fatal(err)
	}
	if got := slicesSet.Get(srv.Device(0).UUID); got != 0 {
		t.Errorf("time slice of GPU 0 = %d after unprepare, want 0 (Default)", got)
	}
	if got := b.cfg.MPS.(*nvmlmock.MPS).Running(); len(got) != 0 {
		t.Errorf("MPS daemons %v still running", got)
	}
	// Two MPS GPUs in one claim are refused before anything is touched.
	mps := sharingConfig(`{"strategy":"MPS"}`)
	two := claimRequest("two-mps",
		plugin.AllocatedDevice{Request: "a", Device: "gpu-2", Config: effective(t, mps)},
		plugin.AllocatedDevice{Request: "b", Device: "gpu-3", Config: effective(t, mps)})
	if err := b.Validate(ctx, two); err == nil || !strings.Contains(err.Error(), "one MPS GPU") {
		t.Errorf("two MPS GPUs in one claim: %v", err)
	}
}

// TestTimeSliceIsPerGPU: a GPU has one time slice, so a second claim
// asking for another interval is refused naming the field, and a node
// without nvidia-smi refuses any interval but Default before anything is
// recorded.
func TestTimeSliceIsPerGPU(t *testing.T) {
	ctx, b, _ := discovered(t, hardware.DGXH100())
	ts := func(uid, interval string) *plugin.PrepareRequest {
		return claimRequest(uid, plugin.AllocatedDevice{Request: "r", Device: "gpu-2",
			ConsumedCapacity: map[resourceapi.QualifiedName]string{"memory": "10Gi"},
			Config:           effective(t, sharingConfig(`{"strategy":"TimeSlicing","timeSlicing":{"interval":"`+interval+`"}}`))})
	}
	if _, err := b.Prepare(ctx, ts("a", "Short")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(ctx, ts("b", "Short")); err != nil {
		t.Fatal(err)
	}
	_, err := b.Prepare(ctx, ts("c", "Long"))
	if err == nil || !strings.Contains(err.Error(), "sharing.timeSlicing.interval: GPU gpu-2 is time-sliced with interval Short by 2 claims") {
		t.Errorf("conflicting interval: %v", err)
	}
	b.cfg.TimeSlice = nil
	err = b.Validate(ctx, ts("d", "Medium"))
	if err == nil || !strings.Contains(err.Error(), "sharing.timeSlicing.interval: Invalid value: \"Medium\": this node cannot set GPU time slices") {
		t.Errorf("interval without nvidia-smi: %v", err)
	}
}

// TestMemoryOnlyClaimsShareCompute: a claim that reserved no cores is
// limited to its fraction of the GPU's memory by default, or not at all
// with computeShare Unlimited (as a DeviceClass config sets it).
func TestMemoryOnlyClaimsShareCompute(t *testing.T) {
	ctx, b, _ := discovered(t, hardware.DGXH100())
	memoryOnly := func(uid string, configs ...json.RawMessage) []string {
		resp, err := b.Prepare(ctx, claimRequest(uid, plugin.AllocatedDevice{Request: "r", Device: "gpu-3",
			ConsumedCapacity: map[resourceapi.QualifiedName]string{"cores": "0", "memory": "20Gi"}, Config: effective(t, configs...)}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Devices[0].Edits.Env
	}
	hami := sharingConfig(`{"strategy":"HAMiCore"}`)
	if env := memoryOnly("a", hami); !slices.Contains(env, "CUDA_DEVICE_SM_LIMIT=25") || !slices.Contains(env, "CUDA_DEVICE_MEMORY_LIMIT=20480m") {
		t.Errorf("proportional share env %v, want 25%% of the SMs for 20Gi of 80Gi", env)
	}
	class := sharingConfig(`{"strategy":"HAMiCore","computeShare":"Unlimited"}`)
	claim := sharingConfig(`{"strategy":"HAMiCore","hamiCore":{"memoryLimit":"16Gi"}}`)
	if env := memoryOnly("b", class, claim); !slices.Contains(env, "CUDA_DEVICE_SM_LIMIT=100") || !slices.Contains(env, "CUDA_DEVICE_MEMORY_LIMIT=16384m") {
		t.Errorf("class compute share under a claim config: env %v, want no SM limit and the claim's memory limit", env)
	}
}
