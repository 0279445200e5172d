package app

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/cdi"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

// TestRollingUpdateKeepsSharedGPUsWorking runs the old and the new
// NVIDIA plugin of a rolling update side by side on one (mock) node,
// each with a backend of its own, as two pods have. The MPS daemon of a
// GPU that claims of both instances use keeps running until the last of
// them is unprepared, whichever instance unprepares, and a MIG instance
// that the new plugin made is destroyed by the old one when the kubelet
// asks the old one to unprepare its claim.
func TestRollingUpdateKeepsSharedGPUsWorking(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := hardware.DGXH100()
	// Unix socket paths are short; t.TempDir's can be too long.
	root, err := os.MkdirTemp("", "strata-nv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	srv, err := nvmlmock.New(m, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	mps := nvmlmock.NewMPS()
	host := Host{NVML: srv, MPS: mps, TimeSlice: nvmlmock.NewTimeSlices()}
	start := func(podUID types.UID) *Plugin {
		t.Helper()
		o := NewOptions()
		o.NodeName, o.NodeUID, o.PodUID = "node-a", "node-a-uid", podUID
		o.PluginDataDir = filepath.Join(root, "plugin")
		o.RegistrarDir = filepath.Join(root, "registry")
		o.CDIDir = filepath.Join(root, "cdi")
		o.SysfsRoot, o.ProcRoot, o.DevRoot = filepath.Join(root, hardware.SysDir), filepath.Join(root, hardware.ProcDir), root
		o.BootIDPath = filepath.Join(root, hardware.BootIDFile)
		o.FabricPartitionsFile = filepath.Join(root, hardware.FabricPartitionsFile)
		o.HAMiCoreLibrary = filepath.Join(root, "libvgpu.so")
		o.MIGMode = string(nvidia.MIGDynamic)
		o.MetricsAddress = ""
		// Each pod its own fake API server: the fake one names no slices,
		// so two plugins publishing to one would replace each other's.
		p, err := Start(ctx, o, fake.NewClientset(), host)
		if err != nil {
			t.Fatalf("start plugin of pod %s: %v", podUID, err)
		}
		t.Cleanup(p.Stop)
		return p
	}
	prepare := func(p *Plugin, claim *resourceapi.ResourceClaim) {
		t.Helper()
		res, err := p.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
		if err == nil {
			err = res[claim.UID].Err
		}
		if err != nil {
			t.Fatalf("prepare claim %s: %v", claim.Name, err)
		}
	}
	unprepare := func(p *Plugin, claim *resourceapi.ResourceClaim) {
		t.Helper()
		res, err := p.driver.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, UID: claim.UID}})
		if err == nil {
			err = res[claim.UID]
		}
		if err != nil {
			t.Fatalf("unprepare claim %s: %v", claim.Name, err)
		}
	}
	gpu0 := srv.Device(0).UUID
	mpsRuns := func(when string, want bool) {
		t.Helper()
		if got := slices.Contains(mps.Running(), gpu0); got != want {
			t.Errorf("%s: MPS daemon of GPU 0 running = %v, want %v", when, got, want)
		}
		wantMode := nvml.COMPUTEMODE_DEFAULT
		if want {
			wantMode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
		}
		if got := srv.ComputeMode(0); got != wantMode {
			t.Errorf("%s: compute mode of GPU 0 = %v, want %v", when, got, wantMode)
		}
	}
	migInstances := func(when string, want int) {
		t.Helper()
		if got := srv.MIGInstances()[1]; got != want {
			t.Errorf("%s: GPU 1 has %d MIG instances, want %d", when, got, want)
		}
	}

	mpsConfig := `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`
	first := nvidiaClaim("uid-first", "first", "gpu-0", mpsConfig)
	second := nvidiaClaim("uid-second", "second", "gpu-0", mpsConfig)
	mig := nvidiaClaim("uid-mig", "mig", "gpu-1-mig-1g10gb-0", "")

	old := start("old")
	prepare(old, first)
	mpsRuns("first MPS claim prepared by the old plugin", true)

	updated := start("new")
	mpsRuns("new plugin started", true)
	prepare(updated, second)
	prepare(updated, mig)
	migInstances("MIG claim prepared by the new plugin", 1)
	// A health probe of the old plugin republishes its devices.
	if err := old.driver.Republish(ctx); err != nil {
		t.Fatal(err)
	}

	unprepare(old, first)
	mpsRuns("first claim unprepared by the old plugin, second still prepared", true)
	unprepare(old, mig)
	migInstances("MIG claim unprepared by the old plugin", 0)
	unprepare(updated, second)
	mpsRuns("every MPS claim unprepared", false)

	w, err := cdi.NewWriter(nvidia.DriverName, filepath.Join(root, "cdi"))
	if err != nil {
		t.Fatal(err)
	}
	if uids, err := w.ClaimUIDs(); err != nil || len(uids) != 0 {
		t.Errorf("CDI specs left: %v %v", uids, err)
	}
}

// nvidiaClaim is a claim allocated one device of node-a, with an opaque
// config unless config is empty.
func nvidiaClaim(uid, name, device, config string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: nvidia.DriverName, Pool: "node-a", Device: device}},
		}}},
	}
	if !strings.Contains(device, "-mig-") {
		// Whole GPUs allow multiple allocations: every result has a share.
		c.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("share-" + uid))
	}
	if config != "" {
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: nvidia.DriverName, Parameters: runtime.RawExtension{Raw: []byte(config)},
			}},
		}}
	}
	return c
}
