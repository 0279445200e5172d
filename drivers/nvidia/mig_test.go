package nvidia

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

func TestMIGDevicesAndCounters(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, _, _ := newBackend(t, hardware.DGXA100())
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range inv.Devices {
		byName[d.Name] = d
	}
	mig, ok := byName["gpu-0-mig-1g5gb-3"]
	if !ok {
		t.Fatalf("no 1g.5gb placement at slice 3; devices: %d", len(inv.Devices))
	}
	checkString(t, mig, "profile", "1g.5gb")
	checkString(t, mig, "type", "mig")
	if mig.ConsumesCounters[0].CounterSet != "gpu-0" {
		t.Errorf("MIG device consumes from %s", mig.ConsumesCounters[0].CounterSet)
	}
	if _, ok := mig.ConsumesCounters[0].Counters["memory-slice-3"]; !ok {
		t.Errorf("placement at 3 does not consume memory-slice-3: %v", mig.ConsumesCounters[0].Counters)
	}
	whole := byName["gpu-0"]
	var set resourceapi.CounterSet
	for _, cs := range inv.SharedCounters {
		if cs.Name == "gpu-0" {
			set = cs
		}
	}
	// The GPU device consumes every counter in full, so it excludes every
	// MIG placement, whether it is used whole or shared.
	if got, want := len(whole.ConsumesCounters[0].Counters), len(set.Counters); got != want {
		t.Errorf("GPU consumes %d of %d counters", got, want)
	}
	for name, c := range set.Counters {
		got := whole.ConsumesCounters[0].Counters[name].Value
		if got.Cmp(c.Value) != 0 {
			t.Errorf("GPU consumes %s of counter %s, the GPU has %s", got.String(), name, c.Value.String())
		}
	}
	if whole.AllowMultipleAllocations == nil || !*whole.AllowMultipleAllocations {
		t.Errorf("GPU device does not allow multiple allocations")
	}
	if _, ok := whole.Capacity["cores"]; !ok {
		t.Errorf("GPU device has no cores capacity")
	}
	if n := len(mig.ConsumesCounters[0].Counters); n > resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption {
		t.Errorf("MIG device consumes %d counters, over the API limit", n)
	}
}

func TestProfileNames(t *testing.T) {
	tests := []struct {
		id   int
		info nvml.GpuInstanceProfileInfo
		want string
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GpuInstanceProfileInfo{SliceCount: 1, MemorySizeMB: 4864}, "1g.5gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GpuInstanceProfileInfo{SliceCount: 1, MemorySizeMB: 10240}, "1g.10gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GpuInstanceProfileInfo{SliceCount: 7, MemorySizeMB: 81920}, "7g.80gb"},
	}
	for _, tc := range tests {
		if got := profileName(tc.id, tc.info); got != tc.want {
			t.Errorf("profileName(%d) = %s, want %s", tc.id, got, tc.want)
		}
	}
}

func prepareMIG(t *testing.T, b *Backend, uid, device string) *plugin.PrepareResponse {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	resp, err := b.Prepare(ctx, &plugin.PrepareRequest{
		Claim:   &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: k8stypes.UID("uid-" + uid)}},
		Devices: []plugin.AllocatedDevice{{Request: "mig", Pool: "node-a", Device: device}},
	})
	if err != nil {
		t.Fatalf("prepare %s: %v", device, err)
	}
	return resp
}

func TestMIGPrepareAndUnprepare(t *testing.T) {
	ctx, b, srv := discovered(t, hardware.DGXA100())
	resp := prepareMIG(t, b, "a", "gpu-1-mig-1g5gb-2")
	if got := srv.MIGInstances()[1]; got != 1 {
		t.Fatalf("%d MIG instances on GPU 1, want 1", got)
	}
	var st deviceState
	if err := json.Unmarshal(resp.Devices[0].State, &st); err != nil || st.GPUInstance == nil {
		t.Fatalf("state %s: %v", resp.Devices[0].State, err)
	}
	var caps []string
	for _, n := range resp.Devices[0].Edits.DeviceNodes {
		if strings.HasPrefix(n.Path, "/dev/nvidia-caps/") {
			caps = append(caps, n.Path)
			if n.Major != hardware.NvidiaCapsMajor {
				t.Errorf("%s major %d", n.Path, n.Major)
			}
		}
	}
	if len(caps) != 2 {
		t.Errorf("capability nodes %v, want GI and CI access", caps)
	}
	if !slices.Contains(resp.Common.Env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("claim-wide env %v does not keep the NVIDIA runtime hook from adding GPUs", resp.Common.Env)
	}
	// Preparing the whole GPU while an instance exists fails cleanly.
	_, err := b.Prepare(ctx, &plugin.PrepareRequest{Devices: []plugin.AllocatedDevice{{Device: "gpu-1"}}})
	if err == nil || !strings.Contains(err.Error(), "still has 1 MIG instances") {
		t.Errorf("whole-GPU prepare over a MIG instance: %v", err)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "uid-a"}, resp.Devices); err != nil {
		t.Fatal(err)
	}
	if got := srv.MIGInstances()[1]; got != 0 {
		t.Errorf("%d MIG instances left after unprepare", got)
	}
}

// TestCrashMidPrepareLeavesNoMIGInstance: the plugin crashed after the
// instance was created but before the checkpoint said so. On restart the
// checkpoint names the device, so the instance is known to be the
// plugin's own and the rollback (no State) destroys it by placement; an
// instance the plugin never recorded (an operator's) is left alone and
// its slices are taken off what is offered.
func TestCrashMidPrepareLeavesNoMIGInstance(t *testing.T) {
	ctx, b, srv := discovered(t, hardware.DGXA100())
	prepareMIG(t, b, "crashed", "gpu-2-mig-1g5gb-4")
	kept := prepareMIG(t, b, "kept", "gpu-3-mig-1g5gb-6")
	if err := srv.ApplyMIGConfig(3, map[string]int{"2g.10gb": 1}); err != nil { // the operator's, at slice 0
		t.Fatal(err)
	}

	// Restart: a new backend over the same hardware, told what the
	// checkpoint holds before it discovers.
	restarted, err := New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	restarted.Restore(ctx, []plugin.ClaimState{
		{ClaimRef: plugin.ClaimRef{UID: "uid-crashed"}, Phase: plugin.PhasePrepareStarted, Devices: []plugin.PreparedDevice{{Device: "gpu-2-mig-1g5gb-4"}}},
		{ClaimRef: plugin.ClaimRef{UID: "uid-kept"}, Phase: plugin.PhasePrepareCompleted, Devices: kept.Devices},
	})
	if _, err := restarted.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Unprepare(ctx, plugin.ClaimRef{UID: "uid-crashed"}, []plugin.PreparedDevice{{Device: "gpu-2-mig-1g5gb-4"}}); err != nil {
		t.Fatal(err)
	}
	if got := srv.MIGInstances()[2]; got != 0 {
		t.Errorf("rollback left %d instances on GPU 2", got)
	}
	err = restarted.Reconcile(ctx, []plugin.ClaimState{{ClaimRef: plugin.ClaimRef{UID: "uid-kept"}, Phase: plugin.PhasePrepareCompleted, Devices: kept.Devices}})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.MIGInstances()[3]; got != 2 {
		t.Errorf("GPU 3 has %d instances after reconcile, want the plugin's and the operator's", got)
	}
	inv, err := restarted.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := deviceNames(inv)
	for _, gone := range []string{"gpu-3-mig-2g10gb-0", "gpu-3-mig-1g5gb-1", "gpu-3-mig-7g40gb-0"} {
		if names[gone] {
			t.Errorf("%s is offered although the operator's instance holds its slices", gone)
		}
	}
	for _, offered := range []string{"gpu-3-mig-1g5gb-6", "gpu-3-mig-2g10gb-2", "gpu-2-mig-7g40gb-0"} {
		if !names[offered] {
			t.Errorf("%s is not offered", offered)
		}
	}
	// The plugin's own instance is released at unprepare, the operator's
	// stays.
	if err := restarted.Unprepare(ctx, plugin.ClaimRef{UID: "uid-kept"}, kept.Devices); err != nil {
		t.Fatal(err)
	}
	if got := srv.MIGInstances()[3]; got != 1 {
		t.Errorf("GPU 3 has %d instances after unprepare, want the operator's", got)
	}
}

func deviceNames(inv *plugin.Inventory) map[string]bool {
	out := map[string]bool{}
	for _, d := range inv.Devices {
		out[d.Name] = true
	}
	return out
}

// TestStaticMIGPublishesWhatExists: in static mode the instances an
// operator made are the GPU's devices; the plugin prepares them without
// creating anything, never destroys them, and never takes a GPU out of
// MIG mode, also across restarts and whole-GPU claims on other GPUs.
func TestStaticMIGPublishesWhatExists(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, srv, _ := newBackend(t, hardware.DGXH100())
	b.cfg.MIG = MIGStatic
	if err := srv.ApplyMIGConfig(0, map[string]int{"3g.40gb": 1, "1g.10gb": 3}); err != nil {
		t.Fatal(err)
	}
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := deviceNames(inv)
	if names["gpu-0"] {
		t.Errorf("gpu-0 is in MIG mode but offered whole")
	}
	profiles := map[string]int{}
	for _, d := range inv.Devices {
		if p := d.Attributes["profile"].StringValue; p != nil {
			profiles[*p]++
		}
	}
	if !names["gpu-0-mig-3g40gb-0"] || profiles["1g.10gb"] != 3 || profiles["3g.40gb"] != 1 || !names["gpu-1"] {
		t.Errorf("devices %v, want the 3g.40gb and three 1g.10gb instances of gpu-0 and the other GPUs whole", names)
	}
	var oneG string
	for n := range names {
		if strings.HasPrefix(n, "gpu-0-mig-1g10gb-") {
			oneG = n
		}
	}
	if len(inv.Devices) != 11 || len(inv.SharedCounters) != 0 {
		t.Errorf("%d devices and %d counter sets, want 4 MIG + 7 GPUs and no counters", len(inv.Devices), len(inv.SharedCounters))
	}
	before := srv.MIGInstances()[0]
	resp := prepareMIG(t, b, "a", oneG)
	whole, err := b.Prepare(ctx, &plugin.PrepareRequest{Claim: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: "uid-w"}}, Devices: []plugin.AllocatedDevice{{Device: "gpu-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.MIGInstances()[0]; got != before {
		t.Errorf("prepare changed GPU 0 from %d to %d instances", before, got)
	}
	var caps []string
	for _, n := range resp.Devices[0].Edits.DeviceNodes {
		caps = append(caps, n.Path)
	}
	if len(caps) != 3 {
		t.Errorf("device nodes %v, want the GPU and its instance's two capabilities", caps)
	}
	// A restart reconciles with nothing prepared: still nothing destroyed.
	restarted, err := New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	restarted.Restore(ctx, nil)
	if err := restarted.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][]plugin.PreparedDevice{resp.Devices, whole.Devices} {
		if err := restarted.Unprepare(ctx, plugin.ClaimRef{UID: "uid-a"}, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := srv.MIGInstances()[0]; got != before {
		t.Errorf("GPU 0 has %d instances after restart and unprepare, want %d", got, before)
	}
	if mode, _, _ := srv.Device(0).GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("GPU 0 left MIG mode")
	}
	// Static mode never creates: a placement that is not an instance is
	// not a device.
	if _, err := restarted.Prepare(ctx, &plugin.PrepareRequest{Devices: []plugin.AllocatedDevice{{Device: "gpu-0-mig-1g10gb-0"}}}); err == nil {
		t.Errorf("prepared a MIG placement that does not exist")
	}
}

func TestSharedLimitsAndMPS(t *testing.T) {
	ctx, b, srv := discovered(t, hardware.DGXH100())
	mpsConfig := json.RawMessage(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mps":{"activeThreadPercentage":30}}}`)
	share := func(uid string, cfg json.RawMessage) (*plugin.PrepareResponse, error) {
		a := plugin.AllocatedDevice{Request: "gpu", Pool: "node-a", Device: "gpu-4",
			ConsumedCapacity: map[resourceapi.QualifiedName]string{"cores": "40", "memory": "20Gi"}}
		if cfg != nil {
			a.Config = effective(t, cfg)
		}
		return b.Prepare(ctx, &plugin.PrepareRequest{
			Claim:   &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: k8stypes.UID("uid-" + uid)}},
			Devices: []plugin.AllocatedDevice{a},
		})
	}
	first, err := share("one", mpsConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M"} {
		if !slices.Contains(first.Devices[0].Edits.Env, want) {
			t.Errorf("MPS env %v lacks %s", first.Devices[0].Edits.Env, want)
		}
	}
	if srv.ComputeMode(4) != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("GPU 4 not in exclusive-process mode under MPS")
	}
	second, err := share("two", mpsConfig)
	if err != nil {
		t.Fatal(err)
	}
	// A HAMi-core claim cannot join a GPU that serves MPS.
	if _, err := share("three", nil); err == nil || !strings.Contains(err.Error(), "either MPS or non-MPS") {
		t.Errorf("mixing strategies on one GPU: %v", err)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "uid-one"}, first.Devices); err != nil {
		t.Fatal(err)
	}
	if got := b.cfg.MPS.(*nvmlmock.MPS).Running(); len(got) != 1 {
		t.Errorf("daemon stopped while a claim still uses it: %v", got)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "uid-two"}, second.Devices); err != nil {
		t.Fatal(err)
	}
	if got := b.cfg.MPS.(*nvmlmock.MPS).Running(); len(got) != 0 {
		t.Errorf("daemon still running after the last claim: %v", got)
	}
	if srv.ComputeMode(4) != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("compute mode not restored")
	}
	over := json.RawMessage(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimit":60}}}`)
	if _, err := share("four", over); err == nil || !strings.Contains(err.Error(), "sharing.hamiCore.coreLimit: Invalid value: 60: exceeds the 40 cores") {
		t.Errorf("core limit above the allocation: %v", err)
	}
}

func TestStaticLayoutHasNoCounters(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, _, _ := newBackend(t, hardware.DGXH100())
	b.cfg.MIG = MIGStatic
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 8 || len(inv.SharedCounters) != 0 {
		t.Errorf("%d devices and %d counter sets without dynamic MIG, want 8 and none", len(inv.Devices), len(inv.SharedCounters))
	}
}

func TestPartitionAttributes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, _, _ := newBackend(t, hardware.DGXH100())
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][3]string{ // partition2, partition4, partition8
		"gpu-0": {"0-1", "0-3", "0-7"},
		"gpu-5": {"4-5", "4-7", "0-7"},
	}
	for _, d := range inv.Devices {
		w, ok := want[d.Name]
		if !ok {
			continue
		}
		for i, size := range []string{"2", "4", "8"} {
			checkString(t, d, "accelerator.strata.sh/partition"+size, w[i])
		}
	}
}

// TestScarceCounters: only resources that placements fitting by memory
// slices could oversubscribe get counters, read from the GPU's profiles:
// the media engines the +me profiles take everywhere, an A100's decoders
// and compute (7 compute slices over 8 memory slices), and memory where a
// profile's memory per slice outgrows the GPU's.
func TestScarceCounters(t *testing.T) {
	tests := []struct {
		machine hardware.Machine
		want    []string
	}{
		{hardware.DGXA100(), []string{"decoders", "jpeg-engines", "multiprocessors", "ofa-engines"}},
		{hardware.DGXH100(), []string{"jpeg-engines", "memory-mib", "ofa-engines"}},
	}
	for _, tc := range tests {
		b, _, _ := newBackend(t, tc.machine)
		got := slices.Sorted(maps.Keys(b.gpus[0].mig.scarce))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: scarce %v, want %v", tc.machine.Name, got, tc.want)
		}
	}
}

// TestMIGModeSwitchThatDoesNotTakeEffect: with something holding the GPU
// open (DCGM does), NVML leaves a MIG mode switch pending. A whole-GPU
// prepare on a GPU still in MIG mode, and a MIG prepare on a GPU out of
// it, are refused naming the pending mode, and the pending switch is
// withdrawn; once the GPU is free the same prepares succeed.
func TestMIGModeSwitchThatDoesNotTakeEffect(t *testing.T) {
	ctx, b, srv := discovered(t, hardware.DGXA100())
	resp := prepareMIG(t, b, "a", "gpu-1-mig-1g5gb-2")
	if err := b.Unprepare(ctx, plugin.ClaimRef{UID: "uid-a"}, resp.Devices); err != nil {
		t.Fatal(err)
	}
	srv.SetHeldOpen(1, true)
	srv.SetHeldOpen(2, true)
	whole := &plugin.PrepareRequest{Claim: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "uid-w"}},
		Devices: []plugin.AllocatedDevice{{Request: "gpu", Pool: "node-a", Device: "gpu-1"}}}
	_, err := b.Prepare(ctx, whole)
	if err == nil || !strings.Contains(err.Error(), "MIG mode is enabled with disabled pending, the switch to disabled did not take effect") {
		t.Fatalf("whole-GPU prepare on a held GPU in MIG mode: %v, want refused naming the pending mode", err)
	}
	if cur, pending, _ := srv.Device(1).GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE || pending != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("MIG mode %d pending %d after the refusal, want enabled with the switch withdrawn", cur, pending)
	}
	_, err = b.Prepare(ctx, &plugin.PrepareRequest{Claim: whole.Claim, Devices: []plugin.AllocatedDevice{{Request: "mig", Pool: "node-a", Device: "gpu-2-mig-1g5gb-0"}}})
	if err == nil || !strings.Contains(err.Error(), "MIG mode is disabled with enabled pending") {
		t.Fatalf("MIG prepare on a held GPU out of MIG mode: %v, want refused", err)
	}
	if got := srv.MIGInstances()[2]; got != 0 {
		t.Errorf("%d MIG instances on the held GPU", got)
	}
	srv.SetHeldOpen(1, false)
	if _, err := b.Prepare(ctx, whole); err != nil {
		t.Errorf("whole-GPU prepare once the GPU is free: %v", err)
	}
}
