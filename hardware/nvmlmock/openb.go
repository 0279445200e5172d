package nvmlmock

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// GPU models of Alibaba's openb trace that go-nvml's mock does not define
// (docs/openb-presets.md). Name, architecture, compute capability and PCI
// device id (device << 16 | vendor, as NVML's pciDeviceId packs them) are
// what NVML reports on the boards; MemoryMB is NVML's total memory in MiB
// on a current data-center driver. None of them has MIG, so the MIG
// profile tables stay empty and patchDevice answers MIG calls as NVML does
// on a GPU without MIG.
var (
	teslaT4 = gpus.Config{
		Name:         "Tesla T4",
		Architecture: nvml.DEVICE_ARCH_TURING,
		Brand:        nvml.BRAND_TESLA,
		MemoryMB:     15360,
		CudaMajor:    7,
		CudaMinor:    5,
		PciDeviceId:  0x1EB810DE,
	}
	teslaP100PCIe16GB = gpus.Config{
		Name:         "Tesla P100-PCIE-16GB",
		Architecture: nvml.DEVICE_ARCH_PASCAL,
		Brand:        nvml.BRAND_TESLA,
		MemoryMB:     16280,
		CudaMajor:    6,
		CudaMinor:    0,
		PciDeviceId:  0x15F810DE,
	}
	teslaV100SXM216GB = gpus.Config{
		Name:         "Tesla V100-SXM2-16GB",
		Architecture: nvml.DEVICE_ARCH_VOLTA,
		Brand:        nvml.BRAND_TESLA,
		MemoryMB:     16160,
		CudaMajor:    7,
		CudaMinor:    0,
		PciDeviceId:  0x1DB110DE,
	}
	teslaV100SXM232GB = gpus.Config{
		Name:         "Tesla V100-SXM2-32GB",
		Architecture: nvml.DEVICE_ARCH_VOLTA,
		Brand:        nvml.BRAND_TESLA,
		MemoryMB:     32510,
		CudaMajor:    7,
		CudaMinor:    0,
		PciDeviceId:  0x1DB510DE,
	}
	nvidiaA10 = gpus.Config{
		Name:         "NVIDIA A10",
		Architecture: nvml.DEVICE_ARCH_AMPERE,
		Brand:        nvml.BRAND_NVIDIA,
		MemoryMB:     23028,
		CudaMajor:    8,
		CudaMinor:    6,
		PciDeviceId:  0x223610DE,
	}
)

// G2 and G3 are Alibaba's internal codes for models the trace does not
// disclose. They are modelled as what is known of them and no more: a
// distinct product name, an unknown architecture and compute capability
// 0.0 (so that no selector on either takes them for a real generation),
// device id 0, and a chosen memory size, round so that it reads as
// chosen rather than measured (the reasoning is in docs/openb-presets.md).
var (
	alibabaG2 = gpus.Config{
		Name:         "Alibaba G2",
		Architecture: nvml.DEVICE_ARCH_UNKNOWN,
		Brand:        nvml.BRAND_UNKNOWN,
		MemoryMB:     16384,
		PciDeviceId:  0x000010DE,
	}
	alibabaG3 = gpus.Config{
		Name:         "Alibaba G3",
		Architecture: nvml.DEVICE_ARCH_UNKNOWN,
		Brand:        nvml.BRAND_UNKNOWN,
		MemoryMB:     32768,
		PciDeviceId:  0x000010DE,
	}
)

// supportsMIG reports whether a model has MIG profiles.
func supportsMIG(c gpus.Config) bool { return len(c.MIGProfiles.GpuInstanceProfiles) > 0 }

// disableMIG makes a GPU answer MIG calls as NVML does on a GPU without
// MIG (a T4, a V100): ERROR_NOT_SUPPORTED. go-nvml's mock reports MIG
// disabled on every model and lets any model enable it. A failed
// SetMigMode leaves the activation status (the first value) at its zero
// value, as go-nvml does when NVML does not write it, so a caller has to
// check the second.
func disableMIG(dev *server.Device) {
	dev.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	dev.SetMigModeFunc = func(int) (nvml.Return, nvml.Return) { return nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED }
	dev.GetGpuInstancePossiblePlacementsFunc = func(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
}
