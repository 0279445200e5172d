package nvidia

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

func TestXIDClassificationAndHoldDown(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	b, srv, _ := newBackend(t, hardware.DGXH100())
	b.health.holdDown = 50 * time.Millisecond
	dev := srv.Devices[2]

	if b.handleEvent(logger, nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 13}) {
		t.Errorf("application XID 13 changed GPU health")
	}
	if len(b.health.taints()) != 0 {
		t.Fatalf("taints after an application XID: %v", b.health.taints())
	}
	if !b.handleEvent(logger, nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 48}) {
		t.Errorf("XID 48 did not change GPU health")
	}
	taints := b.health.taints()["gpu-2"]
	if len(taints) != 1 || taints[0].Key != TaintXID || taints[0].Value != "48" {
		t.Fatalf("taints = %+v, want xid=48", taints)
	}
	if b.probe(logger) {
		t.Errorf("probe within the hold-down cleared the XID")
	}
	time.Sleep(60 * time.Millisecond)
	if !b.probe(logger) || len(b.health.taints()) != 0 {
		t.Errorf("XID taint not cleared after the hold-down: %v", b.health.taints())
	}
}

// TestLostGPUIsTaintedAndTheRestServe: a MIG-capable GPU that falls off
// the bus fails every NVML call, its MIG mode included; the republish
// still succeeds, the lost GPU's devices (whole and MIG) carry the
// gpu-lost taint and every other GPU's devices none. When it comes back
// the taints go.
func TestLostGPUIsTaintedAndTheRestServe(t *testing.T) {
	ctx, b, srv := discovered(t, hardware.DGXH100())
	logger := klog.FromContext(ctx)
	srv.SetLost(1, true)
	if !b.probe(logger) {
		t.Fatalf("the probe did not notice the lost GPU")
	}
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatalf("republish with a lost GPU: %v", err)
	}
	lost, others := 0, 0
	for _, d := range inv.Devices {
		onLost := d.Name == "gpu-1" || strings.HasPrefix(d.Name, "gpu-1-")
		tainted := len(d.Taints) > 0 && d.Taints[0].Key == TaintGPULost && d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoExecute
		switch {
		case onLost && !tainted:
			t.Errorf("device %s of the lost GPU has taints %v, want %s", d.Name, d.Taints, TaintGPULost)
		case onLost:
			lost++
		case len(d.Taints) > 0:
			t.Errorf("device %s of a healthy GPU has taints %v", d.Name, d.Taints)
		default:
			others++
		}
	}
	if lost < 2 || others == 0 {
		t.Fatalf("%d devices of the lost GPU, %d of the others; want its whole and MIG devices and the rest", lost, others)
	}

	srv.SetLost(1, false)
	if !b.probe(logger) {
		t.Fatalf("the probe did not notice the GPU back")
	}
	inv, err = b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if len(d.Taints) > 0 {
			t.Errorf("device %s still tainted %v after the GPU came back", d.Name, d.Taints)
		}
	}
}

// TestLostGPUAtStartUpIsLeftOut: a GPU lost before the plugin starts
// cannot even be named (NVML hands out no handle for it); the plugin
// starts, says which GPU it left out and why, and serves the others.
func TestLostGPUAtStartUpIsLeftOut(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := hardware.DGXH100()
	root := t.TempDir()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	srv, err := nvmlmock.New(m, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetLost(3, true)
	b, err := New(Config{NVML: srv, SysfsRoot: filepath.Join(root, "sys"), ProcRoot: filepath.Join(root, "proc"), DevRoot: root,
		StateDir: filepath.Join(root, "state"), MIG: MIGDynamic})
	if err != nil {
		t.Fatalf("start with a lost GPU: %v", err)
	}
	if u := b.Unusable(); len(u) != 1 || !strings.Contains(u[0].Error(), "GPU 3") || !strings.Contains(u[0].Error(), "GPU_IS_LOST") {
		t.Errorf("unusable GPUs %v, want GPU 3, lost", u)
	}
	inv, err := b.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	whole := 0
	for _, d := range inv.Devices {
		if d.Name == "gpu-3" || strings.HasPrefix(d.Name, "gpu-3-") {
			t.Errorf("the lost GPU's device %s is published", d.Name)
		}
		if !strings.Contains(strings.TrimPrefix(d.Name, "gpu-"), "-") {
			whole++
		}
	}
	if whole != len(m.GPUs())-1 {
		t.Errorf("%d whole GPUs published, want %d", whole, len(m.GPUs())-1)
	}
}
