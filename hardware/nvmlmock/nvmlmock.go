// Package nvmlmock builds go-nvml mock servers that look like a given
// machine layout: the GPU model, count and PCI addresses of the layout,
// and UUIDs that are stable for a node name, so that a simulated node
// reports the same GPUs every time it starts.
package nvmlmock

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"

	"github.com/strata-sh/strata/hardware"
)

// models maps the layouts' GPU model names to go-nvml's GPU definitions,
// with the product name NVML reports on real boards of that model.
var models = map[string]gpus.Config{
	"A100-SXM4-40GB":  named(gpus.A100_SXM4_40GB, "NVIDIA A100-SXM4-40GB"),
	"H100-SXM5-80GB":  named(gpus.H100_SXM5_80GB, "NVIDIA H100 80GB HBM3"),
	"H200-SXM5-141GB": named(gpus.H200_SXM5_141GB, "NVIDIA H200"),
}

func named(c gpus.Config, name string) gpus.Config {
	c.Name = name
	return c
}

// Driver and CUDA versions the mocks report (a current R550 data-center
// driver).
const (
	DriverVersion     = "550.54.15"
	NVMLVersion       = "12.550.54.15"
	CUDADriverVersion = 12040
)

// uuidSpace namespaces the name-based GPU UUIDs.
var uuidSpace = uuid.MustParse("6f0f6a0c-5d0e-4c8b-9a57-3a6b1e0b5c11")

// New returns a mock NVML server for the machine. seed (normally the node
// name) makes the GPU UUIDs unique per node and stable across restarts.
func New(m hardware.Machine, seed string) (*server.Server, error) {
	cfg, ok := models[m.GPUModel]
	if !ok {
		return nil, fmt.Errorf("machine %s: no NVML mock for GPU model %q", m.Name, m.GPUModel)
	}
	layout := m.GPUs()
	srv, err := server.New(
		server.WithGPUs(gpus.Multiple(len(layout), cfg)...),
		server.WithDriverVersion(DriverVersion),
		server.WithNVMLVersion(NVMLVersion),
		server.WithCUDADriverVersion(CUDADriverVersion),
	)
	if err != nil {
		return nil, err
	}
	for i, fn := range layout {
		dev := srv.Devices[i].(*server.Device)
		dev.PciBusID = fn.BusID()
		dev.UUID = "GPU-" + uuid.NewSHA1(uuidSpace, []byte(fmt.Sprintf("%s/%d", seed, i))).String()
		info := pciInfo(fn.BusID(), cfg.PciDeviceId)
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return info, nvml.SUCCESS }
	}
	return srv, nil
}

// pciInfo fills the fields NVML reports for a device; the mock's default
// leaves the bus id empty.
func pciInfo(busID string, deviceID uint32) nvml.PciInfo {
	var info nvml.PciInfo
	var domain, bus, dev, fn uint32
	fmt.Sscanf(busID, "%04x:%02x:%02x.%x", &domain, &bus, &dev, &fn)
	info.Domain, info.Bus, info.Device = domain, bus, dev
	info.PciDeviceId = deviceID
	// NVML reports an 8-digit domain in BusId and a 4-digit one in the
	// legacy field.
	full := fmt.Sprintf("%08x:%02x:%02x.%x", domain, bus, dev, fn)
	for i := 0; i < len(full) && i < len(info.BusId)-1; i++ {
		info.BusId[i] = int8(full[i])
	}
	for i := 0; i < len(busID) && i < len(info.BusIdLegacy)-1; i++ {
		info.BusIdLegacy[i] = int8(busID[i])
	}
	return info
}
