package nvmlmock

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/strata-sh/strata/hardware"
)

// openBGPUs is what NVML reports for each GPU model of the openb presets,
// written out from the boards' public specifications (and the choice for
// G2 and G3) rather than read from the model table under test.
var openBGPUs = map[string]struct {
	name         string
	arch         nvml.DeviceArchitecture
	memoryMiB    uint64
	major, minor int
	pciDeviceID  uint32
}{
	"T4-PCIE-16GB":   {"Tesla T4", nvml.DEVICE_ARCH_TURING, 15360, 7, 5, 0x1EB810DE},
	"P100-PCIE-16GB": {"Tesla P100-PCIE-16GB", nvml.DEVICE_ARCH_PASCAL, 16280, 6, 0, 0x15F810DE},
	"V100-SXM2-16GB": {"Tesla V100-SXM2-16GB", nvml.DEVICE_ARCH_VOLTA, 16160, 7, 0, 0x1DB110DE},
	"V100-SXM2-32GB": {"Tesla V100-SXM2-32GB", nvml.DEVICE_ARCH_VOLTA, 32510, 7, 0, 0x1DB510DE},
	"A10-PCIE-24GB":  {"NVIDIA A10", nvml.DEVICE_ARCH_AMPERE, 23028, 8, 6, 0x223610DE},
	"Alibaba-G2":     {"Alibaba G2", nvml.DEVICE_ARCH_UNKNOWN, 16384, 0, 0, 0x000010DE},
	"Alibaba-G3":     {"Alibaba G3", nvml.DEVICE_ARCH_UNKNOWN, 32768, 0, 0, 0x000010DE},
}

func TestOpenBPresetsReportTheirGPUs(t *testing.T) {
	for _, m := range hardware.OpenBMachines() {
		t.Run(m.Name, func(t *testing.T) {
			want, ok := openBGPUs[m.GPUModel]
			if !ok {
				t.Fatalf("no expectation for GPU model %q", m.GPUModel)
			}
			s, err := New(m, "node-0")
			if err != nil {
				t.Fatal(err)
			}
			layout := m.GPUs()
			if n, ret := s.DeviceGetCount(); ret != nvml.SUCCESS || n != len(layout) {
				t.Fatalf("DeviceGetCount = %d (%s), want %d", n, nvml.ErrorString(ret), len(layout))
			}
			for i, fn := range layout {
				dev, ret := s.DeviceGetHandleByIndex(i)
				if ret != nvml.SUCCESS {
					t.Fatalf("GPU %d: %s", i, nvml.ErrorString(ret))
				}
				if name, _ := dev.GetName(); name != want.name {
					t.Errorf("GPU %d name %q, want %q", i, name, want.name)
				}
				if arch, _ := dev.GetArchitecture(); arch != want.arch {
					t.Errorf("GPU %d architecture %d, want %d", i, arch, want.arch)
				}
				if mem, _ := dev.GetMemoryInfo(); mem.Total != want.memoryMiB<<20 {
					t.Errorf("GPU %d memory %d MiB, want %d", i, mem.Total>>20, want.memoryMiB)
				}
				if major, minor, _ := dev.GetCudaComputeCapability(); major != want.major || minor != want.minor {
					t.Errorf("GPU %d compute capability %d.%d, want %d.%d", i, major, minor, want.major, want.minor)
				}
				info, _ := dev.GetPciInfo()
				if info.PciDeviceId != want.pciDeviceID {
					t.Errorf("GPU %d PCI device id %#x, want %#x", i, info.PciDeviceId, want.pciDeviceID)
				}
				if got, wantBus := cString(info.BusIdLegacy[:]), fn.BusID(); got != wantBus {
					t.Errorf("GPU %d bus id %q, want %q", i, got, wantBus)
				}
			}
		})
	}
}

// TestOpenBGPUsHaveNoMIG: like a T4 or a V100, the openb models refuse
// every MIG call, so a MIG manager cannot enable MIG on them.
func TestOpenBGPUsHaveNoMIG(t *testing.T) {
	for _, m := range hardware.OpenBMachines() {
		t.Run(m.Name, func(t *testing.T) {
			s, err := New(m, "node-0")
			if err != nil {
				t.Fatal(err)
			}
			dev, _ := s.DeviceGetHandleByIndex(0)
			if _, _, ret := dev.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("GetMigMode returned %s, want ERROR_NOT_SUPPORTED", nvml.ErrorString(ret))
			}
			if _, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("SetMigMode returned %s, want ERROR_NOT_SUPPORTED", nvml.ErrorString(ret))
			}
			for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
				if _, ret := dev.GetGpuInstanceProfileInfo(id); ret == nvml.SUCCESS {
					t.Errorf("MIG profile %d is supported", id)
				}
			}
			if err := s.ApplyMIGConfig(0, map[string]int{"1g.10gb": 1}); err == nil {
				t.Error("ApplyMIGConfig succeeded on a GPU without MIG")
			}
			if _, _, ret := dev.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("after ApplyMIGConfig GetMigMode returned %s", nvml.ErrorString(ret))
			}
			if got := s.MIGInstances(); got[0] != 0 {
				t.Errorf("%d MIG instances on GPU 0, want 0", got[0])
			}
		})
	}
}

func TestProductName(t *testing.T) {
	for model, want := range openBGPUs {
		if got, ok := ProductName(model); !ok || got != want.name {
			t.Errorf("ProductName(%q) = %q, %v; want %q", model, got, ok, want.name)
		}
	}
	if got, ok := ProductName("H100-SXM5-80GB"); !ok || got != "NVIDIA H100 80GB HBM3" {
		t.Errorf("ProductName(H100-SXM5-80GB) = %q, %v", got, ok)
	}
	if got, ok := ProductName("V100"); ok {
		t.Errorf("ProductName(V100) = %q, want none", got)
	}
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
