package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/strata-sh/strata/cdi"
)

const testDriver = "gpu.example.com"

// fakeBackend records what it prepared; failPrepare makes Prepare fail.
// hw, if set, is the node's hardware shared with other instances;
// beforePrepare, if set, runs first in Prepare.
type fakeBackend struct {
	devices       []resourceapi.Device
	counters      []resourceapi.CounterSet
	failPrepare   error
	prepared      map[types.UID][]string
	unprepared    []types.UID
	released      map[types.UID][]PreparedDevice
	hw            *fakeHardware
	beforePrepare func(claim types.UID)
}

func (b *fakeBackend) Discover(context.Context) (*Inventory, error) {
	return &Inventory{Devices: b.devices, SharedCounters: b.counters}, nil
}

func (b *fakeBackend) Prepare(_ context.Context, req *PrepareRequest) (*PrepareResponse, error) {
	if b.beforePrepare != nil {
		b.beforePrepare(req.Claim.UID)
	}
	if b.failPrepare != nil {
		return nil, b.failPrepare
	}
	b.hw.take(req.Claim.UID, req.Devices)
	resp := &PrepareResponse{Common: cdispec.ContainerEdits{Env: []string{"COMMON=1"}}}
	for _, a := range req.Devices {
		if b.prepared == nil {
			b.prepared = map[types.UID][]string{}
		}
		b.prepared[req.Claim.UID] = append(b.prepared[req.Claim.UID], a.Device)
		resp.Devices = append(resp.Devices, PreparedDevice{
			Request: a.Request, Pool: a.Pool, Device: a.Device,
			Edits: cdispec.ContainerEdits{Env: []string{"DEV=" + a.Device}},
			State: json.RawMessage(`{"handle":"` + a.Device + `"}`),
		})
	}
	return resp, nil
}

func (b *fakeBackend) Unprepare(_ context.Context, claim ClaimRef, devices []PreparedDevice) error {
	b.unprepared = append(b.unprepared, claim.UID)
	if b.released == nil {
		b.released = map[types.UID][]PreparedDevice{}
	}
	b.released[claim.UID] = devices
	delete(b.prepared, claim.UID)
	b.hw.release(claim.UID, devices)
	return nil
}

// newTestDriver builds a Driver the way Start does, minus the gRPC
// services and slice publishing.
func newTestDriver(t *testing.T, dir string, backend *fakeBackend, bootID string) *Driver {
	t.Helper()
	return newTestDriverOn(t, t.Name(), dir, backend, bootID)
}

// newTestDriverOn is newTestDriver on the named node.
func newTestDriverOn(t *testing.T, node, dir string, backend *fakeBackend, bootID string) *Driver {
	t.Helper()
	d, err := startTestDriver(t, node, dir, backend, bootID, fake.NewClientset())
	if err != nil {
		t.Fatalf("start up: %v", err)
	}
	return d
}

// startTestDriver is newTestDriverOn with an API client, returning the
// start-up's error.
func startTestDriver(t *testing.T, node, dir string, backend *fakeBackend, bootID string, client kubernetes.Interface) (*Driver, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	bootPath := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootPath, []byte(bootID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	register()
	d, err := newDriver(Config{DriverName: testDriver, NodeName: node, Backend: backend, KubeClient: client,
		PluginDataDir: dir, CDIDir: filepath.Join(dir, "cdi"), BootIDPath: bootPath})
	if err != nil {
		t.Fatal(err)
	}
	d.recorder = record.NewFakeRecorder(10)
	return d, d.startUp(ctx)
}

func gpus(names ...string) []resourceapi.Device {
	var out []resourceapi.Device
	for _, n := range names {
		out = append(out, resourceapi.Device{Name: n, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}}})
	}
	return out
}

func allocatedClaim(uid, name string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: testDriver, Pool: "node-a", Device: d,
		})
	}
	return c
}

func TestPrepareWritesSpecAndIsIdempotent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	backend := &fakeBackend{devices: gpus("gpu-0", "gpu-1")}
	d := newTestDriver(t, dir, backend, "boot-1")
	claim := allocatedClaim("uid-1", "train", "gpu-0", "gpu-1")

	for i := 0; i < 2; i++ {
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
		if err != nil || res["uid-1"].Err != nil {
			t.Fatalf("prepare #%d: %v %v", i, err, res["uid-1"].Err)
		}
		var ids []string
		for _, dev := range res["uid-1"].Devices {
			ids = append(ids, dev.CDIDeviceIDs...)
		}
		want := []string{testDriver + "/claim=uid-1-gpu-0", testDriver + "/claim=uid-1-gpu-1"}
		if diff := cmp.Diff(want, ids); diff != "" {
			t.Errorf("prepare #%d CDI IDs (-want +got):\n%s", i, diff)
		}
	}
	if got := len(backend.prepared["uid-1"]); got != 2 {
		t.Errorf("backend prepared %d devices, want 2 (second prepare must be served from the checkpoint)", got)
	}
	if _, err := os.Stat(d.cdi.SpecPath("uid-1")); err != nil {
		t.Errorf("CDI spec missing: %v", err)
	}

	res, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-1"}})
	if err != nil || res["uid-1"] != nil {
		t.Fatalf("unprepare: %v %v", err, res["uid-1"])
	}
	if _, err := os.Stat(d.cdi.SpecPath("uid-1")); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there after unprepare: %v", err)
	}
	// Unpreparing an unknown claim succeeds: the kubelet retries.
	res, err = d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-1"}})
	if err != nil || res["uid-1"] != nil {
		t.Errorf("second unprepare: %v %v", err, res["uid-1"])
	}
}

func TestPrepareRefusesDeviceOfAnotherClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	backend := &fakeBackend{devices: gpus("gpu-0", "gpu-1")}
	d := newTestDriver(t, t.TempDir(), backend, "boot-1")
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-1", "a", "gpu-0")}); res["uid-1"].Err != nil {
		t.Fatal(res["uid-1"].Err)
	}
	res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-2", "b", "gpu-1", "gpu-0")})
	err := res["uid-2"].Err
	if err == nil || !strings.Contains(err.Error(), "already prepared for claim ns/a") {
		t.Fatalf("double allocation error = %v, want one naming the other claim", err)
	}
	if _, ok := d.state.Claims["uid-2"]; ok {
		t.Errorf("refused claim left a checkpoint entry")
	}
}

func TestFailedPrepareLeavesNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	backend := &fakeBackend{devices: gpus("gpu-0"), failPrepare: errors.New("config field sharing.mode: unsupported")}
	d := newTestDriver(t, t.TempDir(), backend, "boot-1")
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-1", "a", "gpu-0")})
	if err != nil {
		t.Fatal(err)
	}
	if res["uid-1"].Err == nil || !strings.Contains(res["uid-1"].Err.Error(), "sharing.mode") {
		t.Fatalf("prepare error = %v, want the backend's error", res["uid-1"].Err)
	}
	if len(d.state.Claims) != 0 {
		t.Errorf("checkpoint holds %v after a failed prepare", d.state.Claims)
	}
	if uids, _ := d.cdi.ClaimUIDs(); len(uids) != 0 {
		t.Errorf("CDI specs %v left after a failed prepare", uids)
	}
	// The backend undid its own work: handing it the claim's devices
	// without state would clean up by identity what others set up.
	if len(backend.unprepared) != 0 {
		t.Errorf("the failed prepare was rolled back through the backend with %v", backend.released)
	}
}

// validatingBackend refuses claims before anything is touched.
type validatingBackend struct {
	*fakeBackend
	invalid error
}

func (b validatingBackend) Validate(context.Context, *PrepareRequest) error { return b.invalid }

// TestInvalidClaimIsRefusedBeforeTheCheckpoint: a claim the backend
// refuses up front never reaches the checkpoint file, not even as a
// prepare in progress, and the hardware is not touched.
func TestInvalidClaimIsRefusedBeforeTheCheckpoint(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fake := &fakeBackend{devices: gpus("gpu-0")}
	d := newTestDriver(t, t.TempDir(), fake, "boot-1")
	d.cfg.Backend = validatingBackend{fakeBackend: fake, invalid: errors.New(`sharing.hamiCore.coreLimit: Invalid value: 150`)}
	before, _ := os.ReadFile(d.store.path)
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-1", "a", "gpu-0")})
	if err != nil {
		t.Fatal(err)
	}
	if res["uid-1"].Err == nil || !strings.Contains(res["uid-1"].Err.Error(), "coreLimit") {
		t.Fatalf("prepare error = %v, want the validation error", res["uid-1"].Err)
	}
	if after, _ := os.ReadFile(d.store.path); string(after) != string(before) {
		t.Errorf("checkpoint rewritten for a refused claim:\n%s", after)
	}
	if len(fake.prepared) != 0 || len(fake.unprepared) != 0 {
		t.Errorf("backend touched: prepared %v, unprepared %v", fake.prepared, fake.unprepared)
	}
}

func TestRecoverRollsBackInterruptedPrepareAndOrphans(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	backend := &fakeBackend{devices: gpus("gpu-0", "gpu-1")}
	d := newTestDriver(t, dir, backend, "boot-1")
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("done", "a", "gpu-0")}); res["done"].Err != nil {
		t.Fatal(res["done"].Err)
	}
	// Simulate a crash after "prepare started" was recorded and the spec
	// written, plus a spec that no checkpoint entry owns.
	d.state.Claims["crashed"] = &ClaimState{ClaimRef: ClaimRef{Namespace: "ns", Name: "b", UID: "crashed"}, Phase: PhasePrepareStarted,
		Devices: []PreparedDevice{{Request: "gpu", Pool: "node-a", Device: "gpu-1"}}}
	if err := d.store.save(d.state); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"crashed", "orphan"} {
		if _, err := d.cdi.WriteClaimSpec(uid, cdispec.ContainerEdits{}, []cdi.Device{{Name: "gpu-1", Edits: cdispec.ContainerEdits{Env: []string{"X=1"}}}}); err != nil {
			t.Fatal(err)
		}
	}

	restarted := newTestDriver(t, dir, backend, "boot-1")
	if diff := cmp.Diff([]string{"done"}, claimUIDs(restarted)); diff != "" {
		t.Errorf("claims after recovery (-want +got):\n%s", diff)
	}
	uids, _ := restarted.cdi.ClaimUIDs()
	if diff := cmp.Diff([]string{"done"}, uids); diff != "" {
		t.Errorf("CDI specs after recovery (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]types.UID{"crashed"}, backend.unprepared); diff != "" {
		t.Errorf("backend unprepare calls (-want +got):\n%s", diff)
	}
}

// TestRecoverFromCorruptCheckpoint: a corrupt checkpoint is moved aside;
// with no claim reserved on the node in the API server, a CDI spec left
// on disk belongs to nothing and is removed.
func TestRecoverFromCorruptCheckpoint(t *testing.T) {
	dir := t.TempDir()
	backend := &fakeBackend{devices: gpus("gpu-0")}
	d := newTestDriver(t, dir, backend, "boot-1")
	if _, err := d.cdi.WriteClaimSpec("lost", cdispec.ContainerEdits{}, []cdi.Device{{Name: "gpu-0", Edits: cdispec.ContainerEdits{Env: []string{"X=1"}}}}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(d.store.path)
	if err := os.WriteFile(d.store.path, []byte(strings.Replace(string(raw), "boot-1", "boot-X", 1)), 0o600); err != nil {
		t.Fatal(err)
	}

	restarted := newTestDriver(t, dir, backend, "boot-1")
	if len(restarted.state.Claims) != 0 {
		t.Errorf("claims from a corrupt checkpoint: %v", restarted.state.Claims)
	}
	moved, _ := filepath.Glob(d.store.path + ".corrupt-*")
	if len(moved) != 1 {
		t.Errorf("corrupt checkpoint not kept aside: %v", moved)
	}
	if uids, _ := restarted.cdi.ClaimUIDs(); len(uids) != 0 {
		t.Errorf("specs of the lost checkpoint were not removed: %v", uids)
	}
	events := restarted.recorder.(*record.FakeRecorder).Events
	select {
	case ev := <-events:
		if !strings.Contains(ev, "CheckpointCorrupt") {
			t.Errorf("event %q, want CheckpointCorrupt", ev)
		}
	default:
		t.Errorf("no event about the corrupt checkpoint")
	}
}

func TestRebootDropsPreparedState(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	backend := &fakeBackend{devices: gpus("gpu-0")}
	d := newTestDriver(t, dir, backend, "boot-1")
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-1", "a", "gpu-0")}); res["uid-1"].Err != nil {
		t.Fatal(res["uid-1"].Err)
	}
	rebooted := newTestDriver(t, dir, backend, "boot-2")
	if len(rebooted.state.Claims) != 0 {
		t.Errorf("state from the previous boot kept: %v", claimUIDs(rebooted))
	}
	if uids, _ := rebooted.cdi.ClaimUIDs(); len(uids) != 0 {
		t.Errorf("specs from the previous boot kept: %v", uids)
	}
}

// listHandler decodes JSON strings and makes a device's configuration the
// list of those that apply, in the order Effective gets them.
type listHandler struct{ decodes int }

func (h *listHandler) Decode(raw []byte) (any, error) {
	h.decodes++
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || s == "bad" {
		return nil, fmt.Errorf("field mode: bad value %s", raw)
	}
	return s, nil
}

func (h *listHandler) Effective(configs []any) (any, error) {
	out := []string{}
	for _, c := range configs {
		out = append(out, c.(string))
	}
	return out, nil
}

type configurableBackend struct {
	fakeBackend
	handler *listHandler
}

func (b *configurableBackend) ConfigHandler() ConfigHandler { return b.handler }

func TestDeviceConfigs(t *testing.T) {
	raw := func(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
	opaque := func(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{Source: source, Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: raw(params)}}}
	}
	configs := []resourceapi.DeviceAllocationConfiguration{
		opaque(resourceapi.AllocationConfigSourceClaim, testDriver, `"claim-gpu"`, "gpu"),
		opaque(resourceapi.AllocationConfigSourceClass, testDriver, `"class"`),
		opaque(resourceapi.AllocationConfigSourceClaim, testDriver, `"claim-nic"`, "nic"),
		opaque(resourceapi.AllocationConfigSourceClaim, "other.example.com", `"bad"`),
	}
	h := &listHandler{}
	dc, err := newDeviceConfigs(&configurableBackend{handler: h}, testDriver, configs)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string][]string{
		"gpu":       {"class", "claim-gpu"},
		"gpu/small": {"class", "claim-gpu"},
		"nic":       {"class", "claim-nic"},
		"gpux":      {"class"},
	}
	for request, want := range tests {
		got, err := dc.forRequest(request)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("config of %q (-want +got):\n%s", request, diff)
		}
	}
	// Each of the driver's configs is decoded once per claim, however
	// many devices it applies to; another driver's is not decoded.
	if h.decodes != 3 {
		t.Errorf("%d decodes, want 3", h.decodes)
	}

	// A config that does not decode fails the claim, naming which.
	bad := append(slices.Clone(configs), opaque(resourceapi.AllocationConfigSourceClass, testDriver, `"bad"`))
	if _, err := newDeviceConfigs(&configurableBackend{handler: &listHandler{}}, testDriver, bad); err == nil || !strings.Contains(err.Error(), "DeviceClass config 4") || !strings.Contains(err.Error(), "field mode") {
		t.Errorf("bad config: %v, want an error naming DeviceClass config 4 and the field", err)
	}
	// A backend without a handler takes no configs.
	if _, err := newDeviceConfigs(&fakeBackend{}, testDriver, configs); err == nil || !strings.Contains(err.Error(), "takes no opaque configuration") {
		t.Errorf("config for a backend without a handler: %v", err)
	}
	if _, err := newDeviceConfigs(&fakeBackend{}, testDriver, configs[3:]); err != nil {
		t.Errorf("another driver's config refused: %v", err)
	}
}

func TestDriverResourcesRespectsSliceLimits(t *testing.T) {
	counterSets := make([]resourceapi.CounterSet, 10)
	for i := range counterSets {
		counterSets[i] = resourceapi.CounterSet{Name: fmt.Sprintf("gpu-%c", 'a'+i), Counters: map[string]resourceapi.Counter{"memory": {}}}
	}
	var devices []resourceapi.Device
	for i := 0; i < 100; i++ {
		devices = append(devices, resourceapi.Device{Name: fmt.Sprintf("plain-%d", i)})
	}
	for i := 0; i < 70; i++ {
		devices = append(devices, resourceapi.Device{
			Name:             fmt.Sprintf("part-%d", i),
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-a", Counters: map[string]resourceapi.Counter{"memory": {}}}},
		})
	}
	res, err := driverResources("node-a", &Inventory{Devices: devices, SharedCounters: counterSets})
	if err != nil {
		t.Fatal(err)
	}
	var shape []string
	total := 0
	for _, s := range res.Pools["node-a"].Slices {
		if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
			t.Errorf("a slice mixes counters and devices")
		}
		shape = append(shape, sliceShape(s.SharedCounters, s.Devices))
		total += len(s.Devices)
	}
	// 10 counter sets in 8+2; 100 plain devices fit one slice of 128, the
	// first partition device lowers that slice's limit to 64, so the
	// devices split as 100 | 64 | 6.
	want := []string{"counters:8", "counters:2", "devices:100", "devices:64", "devices:6"}
	if diff := cmp.Diff(want, shape); diff != "" {
		t.Errorf("slices (-want +got):\n%s", diff)
	}
	if total != len(devices) {
		t.Errorf("published %d devices, want %d", total, len(devices))
	}

	bad := &Inventory{Devices: []resourceapi.Device{{Name: "x", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "missing"}}}}}
	if _, err := driverResources("node-a", bad); err == nil || !strings.Contains(err.Error(), `undeclared counter set "missing"`) {
		t.Errorf("undeclared counter set error = %v", err)
	}
}

func sliceShape(counters []resourceapi.CounterSet, devices []resourceapi.Device) string {
	if len(counters) > 0 {
		return fmt.Sprintf("counters:%d", len(counters))
	}
	return fmt.Sprintf("devices:%d", len(devices))
}

func claimUIDs(d *Driver) []string {
	var out []string
	for uid := range d.state.Claims {
		out = append(out, string(uid))
	}
	slices.Sort(out)
	return out
}

func TestMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	backend := &fakeBackend{devices: gpus("gpu-0", "gpu-1", "gpu-2")}
	d := newTestDriver(t, t.TempDir(), backend, "boot-1")
	before, _ := testutil.GetHistogramMetricCount(prepareDuration.WithLabelValues(testDriver, "success"))
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-1", "a", "gpu-0", "gpu-2")}); res["uid-1"].Err != nil {
		t.Fatal(res["uid-1"].Err)
	}
	after, _ := testutil.GetHistogramMetricCount(prepareDuration.WithLabelValues(testDriver, "success"))
	if after != before+1 {
		t.Errorf("prepare histogram count %d -> %d, want one more", before, after)
	}
	for state, want := range map[string]float64{"allocated": 2, "free": 1} {
		got, _ := testutil.GetGaugeMetricValue(deviceUse.WithLabelValues(testDriver, t.Name(), "gpu", state))
		if got != want {
			t.Errorf("%s GPUs = %v, want %v", state, got, want)
		}
	}
	errsBefore, _ := testutil.GetCounterMetricValue(operationErrors.WithLabelValues(testDriver, "prepare"))
	backend.failPrepare = errors.New("boom")
	d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-2", "b", "gpu-1")})
	errsAfter, _ := testutil.GetCounterMetricValue(operationErrors.WithLabelValues(testDriver, "prepare"))
	if errsAfter != errsBefore+1 {
		t.Errorf("prepare errors %v -> %v, want one more", errsBefore, errsAfter)
	}
}
