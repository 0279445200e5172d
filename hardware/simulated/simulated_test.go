package simulated

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/npusmimock"
	"github.com/strata-sh/strata/internal/linkctl"
)

// TestNewLaysOutTheMachine: the preset's tree is on disk with real
// character devices and the vendor's fakes and stand-ins.
func TestNewLaysOutTheMachine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	root := filepath.Join(t.TempDir(), "sim")
	m, err := New(root, "nvidia-dgx-h100", "node-a", NVIDIA, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if m.NVML == nil || m.MPS == nil || m.TimeSlices == nil {
		t.Fatalf("NVIDIA fakes missing: %+v", m)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(m.DevRoot(), "dev", "nvidia7"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != hardware.NvidiaMajor || unix.Minor(st.Rdev) != 7 {
		t.Errorf("nvidia7 is mode %o rdev %d:%d, want char %d:7", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), hardware.NvidiaMajor)
	}
	for _, p := range []string{filepath.Join(m.SysfsRoot(), "bus", "pci", "devices"), filepath.Join(m.ProcRoot(), "devices"), m.Path(HAMiCoreLibrary)} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}

func TestNewRefusesAPresetWithoutTheVendorsDevices(t *testing.T) {
	for _, tc := range []struct {
		preset string
		vendor Vendor
		want   string
	}{
		{"huawei-atlas-800t-a2", NVIDIA, "no NVIDIA GPUs"},
		{"nvidia-dgx-h100", Ascend, "no Ascend NPUs"},
		{"nvidia-dgx-h100", Cambricon, "no Cambricon MLUs"},
		{"no-such-machine", NVIDIA, `unknown hardware preset "no-such-machine"`},
	} {
		_, err := New(t.TempDir(), tc.preset, "n", tc.vendor, "boot-1")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s for %s: %v, want %q", tc.preset, tc.vendor, err, tc.want)
		}
	}
}

// TestRefuseRealHardware: a host with the vendor's device nodes, driver
// or RDMA devices is refused, naming what was found; other vendors' are
// not in the way.
func TestRefuseRealHardware(t *testing.T) {
	host := t.TempDir()
	for _, v := range []Vendor{NVIDIA, Ascend, Cambricon, RDMA} {
		if err := RefuseRealHardware(host, v); err != nil {
			t.Errorf("empty host, %s: %v", v, err)
		}
	}
	for _, p := range []string{"dev/nvidiactl", "sys/class/infiniband/mlx5_0"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(host, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for v, want := range map[Vendor]string{NVIDIA: "dev/nvidiactl", RDMA: "mlx5_0"} {
		if err := RefuseRealHardware(host, v); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--simulate") {
			t.Errorf("%s: %v, want a refusal naming %s", v, err, want)
		}
	}
	if err := RefuseRealHardware(host, Ascend); err != nil {
		t.Errorf("NVIDIA devices refuse a simulated Ascend machine: %v", err)
	}
}

// TestStateSurvivesRestartsNotReboots: a vNPU made on a simulated Atlas
// is there when the plugin opens the machine again in the same boot, and
// gone after the host rebooted.
func TestStateSurvivesRestartsNotReboots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	root := filepath.Join(t.TempDir(), "sim")
	ctx := context.Background()
	m, err := New(root, "huawei-atlas-800t-a2", "node-a", Ascend, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NPUSMI.Run(ctx, "set", "-t", "create-vnpu", "-i", "0", "-c", "0", "-f", "vir05_1c_16g", "-v", "100"); err != nil {
		t.Fatal(err)
	}
	vnpus := func(m *Machine) []int { return m.NPUSMI.Runner.(*npusmimock.NPUSMI).VNPUs() }
	again, err := New(root, "huawei-atlas-800t-a2", "node-a", Ascend, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := vnpus(again); len(got) != 1 || got[0] != 100 {
		t.Errorf("after a restart the machine has vNPUs %v, want [100]", got)
	}
	rebooted, err := New(root, "huawei-atlas-800t-a2", "node-a", Ascend, "boot-2")
	if err != nil {
		t.Fatal(err)
	}
	if got := vnpus(rebooted); len(got) != 0 {
		t.Errorf("after a reboot the machine has vNPUs %v, want none", got)
	}
}

// TestGPUAndLinkStateSurviveRestartsNotReboots: a MIG instance made on a
// simulated HGX and a VF's settings on a simulated NIC are there when the
// plugin opens the machine again in the same boot, and gone after the
// host rebooted.
func TestGPUAndLinkStateSurviveRestartsNotReboots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	const preset = "nvidia-hgx-h100-cpu-nics"
	gpuRoot, nicRoot := filepath.Join(t.TempDir(), "gpu"), filepath.Join(t.TempDir(), "nic")
	open := func(root string, v Vendor, boot string) *Machine {
		t.Helper()
		m, err := New(root, preset, "node-a", v, boot)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	gpus := open(gpuRoot, NVIDIA, "boot-1")
	if err := gpus.NVML.ApplyMIGConfig(3, map[string]int{"1g.10gb": 1}); err != nil {
		t.Fatal(err)
	}
	nics := open(nicRoot, RDMA, "boot-1")
	var pf string
	for _, d := range nics.Layout.RDMADevices() {
		if d.PF == "" && d.NIC.NumVFs > 0 {
			pf = d.NetDev
			break
		}
	}
	if pf == "" {
		t.Fatalf("preset %s has no NIC with VFs", preset)
	}
	set := linkctl.VFState{Trust: true, SpoofCheck: true, MaxTxRateMbps: 1000}
	if err := nics.Links.SetVF(pf, 1, set); err != nil {
		t.Fatal(err)
	}

	if got := open(gpuRoot, NVIDIA, "boot-1").NVML.MIGInstances()[3]; got != 1 {
		t.Errorf("after a restart GPU 3 has %d MIG instances, want 1", got)
	}
	if got, err := open(nicRoot, RDMA, "boot-1").Links.VF(pf, 1); err != nil || got != set {
		t.Errorf("after a restart %s vf 1 is %+v (%v), want %+v", pf, got, err, set)
	}
	if got := open(gpuRoot, NVIDIA, "boot-2").NVML.MIGInstances()[3]; got != 0 {
		t.Errorf("after a reboot GPU 3 has %d MIG instances, want none", got)
	}
	if got, _ := open(nicRoot, RDMA, "boot-2").Links.VF(pf, 1); got == set {
		t.Errorf("after a reboot %s vf 1 kept %+v", pf, got)
	}
}
