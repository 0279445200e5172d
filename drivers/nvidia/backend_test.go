package nvidia

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

// newBackend returns a backend on a fake node of the given machine.
func newBackend(t *testing.T, m hardware.Machine) (*Backend, *nvmlmock.Server, string) {
	t.Helper()
	root := t.TempDir()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	srv, err := nvmlmock.New(m, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{
		NVML: srv, SysfsRoot: filepath.Join(root, "sys"), ProcRoot: filepath.Join(root, "proc"), DevRoot: root,
		StateDir: filepath.Join(root, "state"), FabricPartitionsFile: filepath.Join(root, hardware.FabricPartitionsFile),
		MPS: nvmlmock.NewMPS(), MIG: MIGDynamic, TimeSlice: nvmlmock.NewTimeSlices(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, srv, root
}

// discovered returns a backend on a fake node of the machine that has
// discovered its devices, with a test context.
func discovered(t *testing.T, m hardware.Machine) (context.Context, *Backend, *nvmlmock.Server) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	b, srv, _ := newBackend(t, m)
	if _, err := b.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, b, srv
}

func TestDiscoverPublishesTopology(t *testing.T) {
	for _, m := range []hardware.Machine{hardware.DGXH100(), hardware.DGXA100(), hardware.HGXH200()} {
		t.Run(m.Name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			b, srv, _ := newBackend(t, m)
			inv, err := b.Discover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			layout := m.GPUs()
			// Whole GPUs come first, in minor order.
			for i, dev := range inv.Devices[:len(layout)] {
				want := layout[i]
				if dev.Name != "gpu-"+itoa(i) {
					t.Errorf("device %d named %s", i, dev.Name)
				}
				checkString(t, dev, "uuid", srv.Device(i).UUID)
				checkString(t, dev, "resource.kubernetes.io/pciBusID", want.BusID())
				checkString(t, dev, "resource.kubernetes.io/pcieRoot", want.Root())
				checkString(t, dev, "accelerator.strata.sh/pcieSwitch", want.Path[2])
				checkString(t, dev, "accelerator.strata.sh/type", "gpu")
				if got := *dev.Attributes["accelerator.strata.sh/numaNode"].IntValue; got != int64(want.NUMANode) {
					t.Errorf("%s numaNode = %d, want %d", dev.Name, got, want.NUMANode)
				}
				if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
					t.Errorf("%s has %d attributes and capacities, over the API limit", dev.Name, n)
				}
			}
		})
	}
}

func TestDiscoverModelAndMemory(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tests := []struct {
		machine     hardware.Machine
		model, arch string
		memory      string
		cc          string
	}{
		{hardware.DGXH100(), "H100", "Hopper", "80Gi", "9.0.0"},
		{hardware.DGXA100(), "A100", "Ampere", "40Gi", "8.0.0"},
		{hardware.HGXH200(), "H200", "Hopper", "141Gi", "9.0.0"},
	}
	for _, tc := range tests {
		b, _, _ := newBackend(t, tc.machine)
		inv, err := b.Discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dev := inv.Devices[0]
		checkString(t, dev, "accelerator.strata.sh/model", tc.model)
		checkString(t, dev, "architecture", tc.arch)
		if got := *dev.Attributes["cudaComputeCapability"].VersionValue; got != tc.cc {
			t.Errorf("%s compute capability %s, want %s", tc.machine.Name, got, tc.cc)
		}
		if got := dev.Capacity["memory"].Value; got.Cmp(resource.MustParse(tc.memory)) != 0 {
			t.Errorf("%s memory %s, want %s", tc.machine.Name, got.String(), tc.memory)
		}
	}
}

func TestPrepareInjectsDeviceNodesAndVisibleDevices(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, _, root := newBackend(t, hardware.DGXH100())
	if _, err := b.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	req := &plugin.PrepareRequest{
		Claim: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}},
		Devices: []plugin.AllocatedDevice{
			{Request: "gpus", Pool: "node-a", Device: "gpu-2"},
			{Request: "gpus", Pool: "node-a", Device: "gpu-6"},
		},
	}
	resp, err := b.Prepare(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, minor := range []int64{2, 6} {
		n := resp.Devices[i].Edits.DeviceNodes[0]
		if n.Path != "/dev/nvidia"+itoa(int(minor)) || n.Minor != minor || n.Major != hardware.NvidiaMajor || n.HostPath != filepath.Join(root, "dev", "nvidia"+itoa(int(minor))) {
			t.Errorf("device node %d = %+v", i, n)
		}
	}
	var uvm bool
	for _, n := range resp.Common.DeviceNodes {
		if n.Path == "/dev/nvidia-uvm" && n.Major == hardware.NvidiaUVMMajor {
			uvm = true
		}
	}
	if !uvm {
		t.Errorf("common edits %+v lack /dev/nvidia-uvm with the major from /proc/devices", resp.Common.DeviceNodes)
	}
	// Visibility is per device: the claim-wide edits name no GPU, and
	// each device's edits name only its own node.
	if !slices.Contains(resp.Common.Env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("claim-wide env %v does not keep the NVIDIA runtime hook from adding GPUs", resp.Common.Env)
	}
	for _, n := range resp.Common.DeviceNodes {
		if strings.HasPrefix(n.Path, "/dev/nvidia") && n.Major == hardware.NvidiaMajor && n.Minor < 255 {
			t.Errorf("claim-wide edits inject GPU node %s", n.Path)
		}
	}
	for i, d := range resp.Devices {
		if len(d.Edits.DeviceNodes) != 1 || len(d.Edits.Env) != 0 {
			t.Errorf("device %d edits %+v, want its own node only", i, d.Edits)
		}
	}

	req.Devices = []plugin.AllocatedDevice{{Request: "gpus", Pool: "node-a", Device: "gpu-9"}}
	if _, err := b.Prepare(ctx, req); err == nil || !strings.Contains(err.Error(), "gpu-9") {
		t.Errorf("prepare of an unknown device: %v", err)
	}
}

func TestNewWithoutDriverLoaded(t *testing.T) {
	root := t.TempDir()
	if err := hardware.WriteNode(root, hardware.DGXH100(), "boot"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "devices"), []byte("Character devices:\n  1 mem\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := nvmlmock.New(hardware.DGXH100(), "node-a")
	_, err := New(Config{NVML: srv, SysfsRoot: filepath.Join(root, "sys"), ProcRoot: filepath.Join(root, "proc")})
	if err == nil || !strings.Contains(err.Error(), "is the NVIDIA driver loaded") {
		t.Errorf("error = %v, want a hint that the driver is not loaded", err)
	}
}

func checkString(t *testing.T, dev resourceapi.Device, name, want string) {
	t.Helper()
	attr, ok := dev.Attributes[resourceapi.QualifiedName(name)]
	if !ok || attr.StringValue == nil {
		t.Errorf("%s: no string attribute %s", dev.Name, name)
		return
	}
	if *attr.StringValue != want {
		t.Errorf("%s: %s = %q, want %q", dev.Name, name, *attr.StringValue, want)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
