// Package nvidia is the NVIDIA GPU backend of Strata's kubelet plugin
// (driver nvidia.strata.sh). It discovers GPUs through NVML and sysfs and
// prepares them for containers through CDI.
package nvidia

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
)

// DriverName is the DRA driver name of this backend.
const DriverName = "nvidia.strata.sh"

// AcceleratorDomain is the vendor-neutral attribute domain that every
// Strata accelerator driver publishes.
const AcceleratorDomain = "accelerator.strata.sh"

// Config wires the backend to the hardware.
type Config struct {
	// NVML is the NVML library (or a mock of it).
	NVML nvml.Interface
	// SysfsRoot is where sysfs is mounted ("" means /sys).
	SysfsRoot string
	// ProcRoot is where procfs is mounted ("" means /proc); the dynamic
	// nvidia-uvm major is read from its devices file.
	ProcRoot string
	// DevRoot is prefixed to device node paths on the host ("" means /).
	DevRoot string
}

// Backend implements plugin.Backend for NVIDIA GPUs.
type Backend struct {
	cfg Config
	pci *pci.Reader

	mu   sync.Mutex
	gpus map[string]*gpu
}

var _ plugin.Backend = (*Backend)(nil)

// New initialises NVML and returns a backend.
func New(cfg Config) (*Backend, error) {
	if cfg.NVML == nil {
		return nil, fmt.Errorf("NVML library is required")
	}
	if ret := cfg.NVML.Init(); ret != nvml.SUCCESS {
		return nil, nvmlError("init", ret)
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/"
	}
	return &Backend{cfg: cfg, pci: pci.NewReader(cfg.SysfsRoot)}, nil
}

// Close releases NVML.
func (b *Backend) Close() { b.cfg.NVML.Shutdown() }

// Discover implements plugin.Backend.
func (b *Backend) Discover(_ context.Context) (*plugin.Inventory, error) {
	gpus, err := discoverGPUs(b.cfg.NVML, b.pci)
	if err != nil {
		return nil, err
	}
	inv := &plugin.Inventory{}
	byName := make(map[string]*gpu, len(gpus))
	for _, g := range gpus {
		dev, err := wholeDevice(g)
		if err != nil {
			return nil, fmt.Errorf("GPU %s: %w", g.name, err)
		}
		inv.Devices = append(inv.Devices, dev)
		byName[g.name] = g
	}
	b.mu.Lock()
	b.gpus = byName
	b.mu.Unlock()
	return inv, nil
}

// wholeDevice describes a physical GPU as a DRA device.
func wholeDevice(g *gpu) (resourceapi.Device, error) {
	cc, err := semverOf(g.computeCap)
	if err != nil {
		return resourceapi.Device{}, err
	}
	drv, err := semverOf(g.driverVersion)
	if err != nil {
		return resourceapi.Device{}, err
	}
	cuda, err := semverOf(g.cudaVersion)
	if err != nil {
		return resourceapi.Device{}, err
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                  {StringValue: ptr.To("gpu")},
		"uuid":                  {StringValue: ptr.To(g.uuid)},
		"productName":           {StringValue: ptr.To(g.productName)},
		"architecture":          {StringValue: ptr.To(g.architecture)},
		"index":                 {IntValue: ptr.To(int64(g.index))},
		"minor":                 {IntValue: ptr.To(int64(g.minor))},
		"cudaComputeCapability": {VersionValue: ptr.To(cc)},
		"driverVersion":         {VersionValue: ptr.To(drv)},
		"cudaDriverVersion":     {VersionValue: ptr.To(cuda)},
	}
	for k, v := range acceleratorAttributes(g) {
		attrs[k] = v
	}
	return resourceapi.Device{
		Name:       g.name,
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: *resource.NewQuantity(int64(g.memoryBytes), resource.BinarySI)},
		},
	}, nil
}

// acceleratorAttributes are the vendor-neutral and standard attributes
// shared by a GPU and its partitions.
func acceleratorAttributes(g *gpu) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	q := func(name string) resourceapi.QualifiedName {
		return resourceapi.QualifiedName(AcceleratorDomain + "/" + name)
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		q("type"):     {StringValue: ptr.To("gpu")},
		q("vendor"):   {StringValue: ptr.To("nvidia")},
		q("model"):    {StringValue: ptr.To(g.family)},
		q("numaNode"): {IntValue: ptr.To(int64(g.topology.NUMANode))},
		deviceattribute.StandardDeviceAttributePCIeRoot: {StringValue: ptr.To(g.topology.Root)},
		deviceattribute.StandardDeviceAttributePCIBusID: {StringValue: ptr.To(g.topology.BusID)},
	}
	if g.topology.Switch != "" {
		attrs[q("pcieSwitch")] = resourceapi.DeviceAttribute{StringValue: ptr.To(g.topology.Switch)}
	}
	return attrs
}

// Prepare implements plugin.Backend.
func (b *Backend) Prepare(_ context.Context, req *plugin.PrepareRequest) (*plugin.PrepareResponse, error) {
	majors, err := b.majors()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &plugin.PrepareResponse{Common: b.controlEdits(majors)}
	var uuids []string
	for _, a := range req.Devices {
		g, ok := b.gpus[a.Device]
		if !ok {
			return nil, fmt.Errorf("device %s is not a GPU of this node", a.Device)
		}
		if len(a.Configs) > 0 {
			return nil, fmt.Errorf("device %s: opaque configuration for %s is not supported for whole GPUs", a.Device, DriverName)
		}
		uuids = append(uuids, g.uuid)
		resp.Devices = append(resp.Devices, plugin.PreparedDevice{
			Request: a.Request, Pool: a.Pool, Device: a.Device, ShareID: a.ShareID,
			Edits: cdispec.ContainerEdits{
				DeviceNodes: []*cdispec.DeviceNode{b.node(fmt.Sprintf("nvidia%d", g.minor), majors.nvidia, int64(g.minor))},
			},
		})
	}
	resp.Common.Env = append(resp.Common.Env, "NVIDIA_VISIBLE_DEVICES="+strings.Join(uuids, ","))
	return resp, nil
}

// Unprepare implements plugin.Backend. Whole GPUs hold no state outside the
// CDI spec, which the plugin removes.
func (b *Backend) Unprepare(context.Context, plugin.ClaimRef, []plugin.PreparedDevice) error {
	return nil
}

// controlEdits are the device nodes every CUDA process needs besides the
// GPU itself.
func (b *Backend) controlEdits(m majors) cdispec.ContainerEdits {
	return cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{
			b.node("nvidiactl", m.nvidia, 255),
			b.node("nvidia-uvm", m.uvm, 0),
			b.node("nvidia-uvm-tools", m.uvm, 1),
		},
		Env: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
	}
}

// node describes a character device fully (type, major, minor), so the
// runtime does not need to stat the host to inject it.
func (b *Backend) node(name string, major, minor int64) *cdispec.DeviceNode {
	return &cdispec.DeviceNode{
		Path:     "/dev/" + name,
		HostPath: filepath.Join(b.cfg.DevRoot, "dev", name),
		Type:     "c",
		Major:    major,
		Minor:    minor,
	}
}

type majors struct{ nvidia, uvm int64 }

// majors reads the character device majors the NVIDIA kernel modules
// registered. nvidia-uvm's is dynamic and differs between hosts.
func (b *Backend) majors() (majors, error) {
	path := filepath.Join(b.cfg.ProcRoot, "devices")
	f, err := os.Open(path)
	if err != nil {
		return majors{}, fmt.Errorf("read device majors: %w", err)
	}
	defer f.Close()
	var m majors
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch fields[1] {
		case "nvidia-frontend", "nvidia":
			m.nvidia = n
		case "nvidia-uvm":
			m.uvm = n
		}
	}
	if m.nvidia == 0 || m.uvm == 0 {
		return majors{}, fmt.Errorf("%s lists no nvidia or nvidia-uvm character device: is the NVIDIA driver loaded?", path)
	}
	return m, sc.Err()
}
