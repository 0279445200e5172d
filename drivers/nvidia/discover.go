package nvidia

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/strata-sh/strata/drivers/pci"
)

// gpu is what discovery learns about one physical GPU.
type gpu struct {
	// name is the DRA device name, derived from the minor number so that
	// it is stable across reboots and driver reloads (enumeration order is
	// not).
	name          string
	index         int
	minor         int
	uuid          string
	productName   string
	family        string
	architecture  string
	computeCap    string
	memoryBytes   uint64
	topology      pci.Topology
	driverVersion string
	cudaVersion   string
	// handle is the NVML device.
	handle nvml.Device
	// mig describes the MIG profiles the GPU supports; nil if none.
	mig *migCapability
	// partitions maps a partition size to the id of the NVLink partition
	// of that size the GPU belongs to.
	partitions map[int]string
}

// discoverGPUs enumerates the GPUs through NVML and sysfs. A GPU that
// cannot be read (fallen off the bus, an NVML error) is left out and its
// error returned in unusable, so that one bad GPU does not stop the
// plugin from serving the others; it fails only when no GPU can be read.
func discoverGPUs(lib nvml.Interface, topo *pci.Reader) (gpus []*gpu, unusable []error, err error) {
	driverVersion, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, nil, nvmlError("get driver version", ret)
	}
	cuda, ret := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, nil, nvmlError("get CUDA driver version", ret)
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nil, nvmlError("count devices", ret)
	}
	gpus = make([]*gpu, 0, count)
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			unusable = append(unusable, fmt.Errorf("GPU %d: %w", i, nvmlError("get device handle", ret)))
			continue
		}
		g, err := describe(dev, topo)
		if err != nil {
			unusable = append(unusable, fmt.Errorf("GPU %d: %w", i, err))
			continue
		}
		g.index = i
		g.driverVersion = driverVersion
		g.cudaVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 && len(unusable) > 0 {
		return nil, nil, fmt.Errorf("no GPU can be read: %w", errors.Join(unusable...))
	}
	return gpus, unusable, nil
}

func describe(dev nvml.Device, topo *pci.Reader) (*gpu, error) {
	g := &gpu{handle: dev}
	var ret nvml.Return
	if g.minor, ret = dev.GetMinorNumber(); ret != nvml.SUCCESS {
		return nil, nvmlError("get minor number", ret)
	}
	g.name = fmt.Sprintf("gpu-%d", g.minor)
	if g.uuid, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return nil, nvmlError("get UUID", ret)
	}
	if g.productName, ret = dev.GetName(); ret != nvml.SUCCESS {
		return nil, nvmlError("get name", ret)
	}
	g.family = family(g.productName)
	arch, ret := dev.GetArchitecture()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get architecture", ret)
	}
	g.architecture = architectureName(arch)
	major, minor, ret := dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get compute capability", ret)
	}
	g.computeCap = fmt.Sprintf("%d.%d", major, minor)
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get memory info", ret)
	}
	g.memoryBytes = mem.Total
	info, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get PCI info", ret)
	}
	t, err := topo.Lookup(cString(info.BusId[:]))
	if err != nil {
		return nil, err
	}
	g.topology = t
	if g.mig, err = discoverMIG(dev); err != nil {
		return nil, err
	}
	return g, nil
}

// familyRE picks the GPU family ("H100", "A100", "L40S") out of a product
// name such as "NVIDIA H100 80GB HBM3".
var familyRE = regexp.MustCompile(`\b([A-Z]{1,2}\d{1,3}[A-Z]?)\b`)

func family(product string) string {
	if m := familyRE.FindStringSubmatch(strings.TrimPrefix(product, "NVIDIA ")); m != nil {
		return m[1]
	}
	return product
}

func architectureName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_PASCAL:
		return "Pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "Volta"
	case nvml.DEVICE_ARCH_TURING:
		return "Turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "Ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	default:
		return "Unknown"
	}
}

// semverOf turns "550.54.15" or "9.0" into a semantic version string for a
// version attribute.
func semverOf(v string) (string, error) {
	parsed, err := version.ParseGeneric(v)
	if err != nil {
		return "", fmt.Errorf("version %q: %w", v, err)
	}
	return fmt.Sprintf("%d.%d.%d", parsed.Major(), parsed.Minor(), parsed.Patch()), nil
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

func nvmlError(op string, ret nvml.Return) error {
	return fmt.Errorf("NVML %s: %s", op, nvml.ErrorString(ret))
}
