package nvidia

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
)

// deviceKind is what a published device stands for.
type deviceKind string

// Device kinds; the value is the "type" attribute.
const (
	kindGPU deviceKind = "gpu"
	kindMIG deviceKind = "mig"
)

// Capacity of a GPU device: compute in percent of the GPU, memory in
// bytes, requested in whole MiB.
const (
	sharedCores    = 100
	memoryStepSize = 1 << 20
)

// device is one published device and what it maps to.
type device struct {
	name      string
	kind      deviceKind
	gpu       *gpu
	profile   *migProfile
	placement nvml.GpuInstancePlacement
}

// counterSetName names the counter set of a GPU.
func counterSetName(g *gpu) string { return g.name }

// Counter names. Memory slices are one counter each so that overlapping
// MIG placements exclude each other; the rest are totals.
const (
	counterMemory          = "memory"
	counterMultiprocessors = "multiprocessors"
	counterCopyEngines     = "copy-engines"
	counterDecoders        = "decoders"
	counterEncoders        = "encoders"
	counterJPEG            = "jpeg-engines"
	counterOFA             = "ofa-engines"
)

func memorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// gpuCounters is everything a GPU has. The GPU device consumes all of
// it, so it excludes every MIG device.
func gpuCounters(g *gpu) map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{counterMemory: quantity(int64(g.memoryBytes))}
	if g.mig != nil {
		addEngines(c, g.mig.totals)
		for i := 0; i < g.mig.memorySlices; i++ {
			c[memorySliceCounter(i)] = quantity(1)
		}
	}
	return c
}

// migCounters is what one MIG placement consumes.
func migCounters(p *migProfile, pl nvml.GpuInstancePlacement) map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{counterMemory: quantity(int64(p.info.MemorySizeMB) << 20)}
	addEngines(c, p.info)
	for i := int(pl.Start); i < int(pl.Start+pl.Size); i++ {
		c[memorySliceCounter(i)] = quantity(1)
	}
	return c
}

func addEngines(c map[string]resourceapi.Counter, info nvml.GpuInstanceProfileInfo) {
	for name, n := range map[string]uint32{
		counterMultiprocessors: info.MultiprocessorCount,
		counterCopyEngines:     info.CopyEngineCount,
		counterDecoders:        info.DecoderCount,
		counterEncoders:        info.EncoderCount,
		counterJPEG:            info.JpegCount,
		counterOFA:             info.OfaCount,
	} {
		if n > 0 {
			c[name] = quantity(int64(n))
		}
	}
}

func quantity(v int64) resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
}

// deviceSet is the published devices of a node with their counters.
type deviceSet struct {
	devices  []resourceapi.Device
	counters []resourceapi.CounterSet
	byName   map[string]*device
}

// buildDevices lays out every GPU as one device with consumable capacity
// (cores and memory): a claim that asks for no capacity gets all of it
// (the whole GPU), a claim that asks for part shares the GPU. With dynamic
// MIG, each GPU also gets a counter set and one device per MIG placement;
// the GPU device consumes every counter in full (once, however many
// shares it has), so a GPU is used whole/shared or as MIG instances,
// never both.
//
// Counters are opt-in because the 1.36 allocator considers the counter
// slices of every node when it allocates on any one node: a cluster of
// partitionable nodes costs the scheduler in proportion to its size for
// every node it filters (see docs/nvidia.md).
func buildDevices(gpus []*gpu, taints map[string][]resourceapi.DeviceTaint, dynamicMIG bool) (*deviceSet, error) {
	set := &deviceSet{byName: map[string]*device{}}
	var migs []resourceapi.Device
	for _, g := range gpus {
		base, err := baseAttributes(g)
		if err != nil {
			return nil, fmt.Errorf("GPU %s: %w", g.name, err)
		}
		gpuTaints := taints[g.name]
		dev := resourceapi.Device{
			Name:                     g.name,
			Attributes:               withAttrs(base, kindGPU, true, g.partitionAttributes()),
			AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"cores": {
					Value:         *resource.NewQuantity(sharedCores, resource.DecimalSI),
					RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(sharedCores, resource.DecimalSI), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(1, resource.DecimalSI), Step: resource.NewQuantity(1, resource.DecimalSI)}},
				},
				"memory": {
					Value:         bytes(g.memoryBytes),
					RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(bytes(g.memoryBytes)), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(memoryStepSize, resource.BinarySI), Step: resource.NewQuantity(memoryStepSize, resource.BinarySI)}},
				},
			},
			Taints: gpuTaints,
		}
		set.add(&device{name: g.name, kind: kindGPU, gpu: g})
		if !dynamicMIG || g.mig == nil {
			set.devices = append(set.devices, dev)
			continue
		}
		set.counters = append(set.counters, resourceapi.CounterSet{Name: counterSetName(g), Counters: gpuCounters(g)})
		dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(g), Counters: gpuCounters(g)}}
		set.devices = append(set.devices, dev)
		for _, p := range g.mig.profiles {
			for _, pl := range p.placements {
				name := migDeviceName(g, p, pl)
				attrs := withAttrs(base, kindMIG, false, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"profile":        {StringValue: ptr.To(p.name)},
					"parentUUID":     {StringValue: ptr.To(g.uuid)},
					"placementStart": {IntValue: ptr.To(int64(pl.Start))},
					"placementSize":  {IntValue: ptr.To(int64(pl.Size))},
				})
				delete(attrs, "uuid") // a MIG device has its own UUID only once created
				migs = append(migs, resourceapi.Device{
					Name:       name,
					Attributes: attrs,
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
						"memory":          {Value: bytes(uint64(p.info.MemorySizeMB) << 20)},
						"multiprocessors": {Value: *resource.NewQuantity(int64(p.info.MultiprocessorCount), resource.DecimalSI)},
					},
					ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(g), Counters: migCounters(p, pl)}},
					Taints:           gpuTaints,
				})
				set.add(&device{name: name, kind: kindMIG, gpu: g, profile: p, placement: pl})
			}
		}
	}
	set.devices = append(set.devices, migs...)
	return set, nil
}

func (s *deviceSet) add(d *device) { s.byName[d.name] = d }

// baseAttributes are shared by a GPU and every device carved from it.
func baseAttributes(g *gpu) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	cc, err := semverOf(g.computeCap)
	if err != nil {
		return nil, err
	}
	drv, err := semverOf(g.driverVersion)
	if err != nil {
		return nil, err
	}
	cuda, err := semverOf(g.cudaVersion)
	if err != nil {
		return nil, err
	}
	q := func(name string) resourceapi.QualifiedName {
		return resourceapi.QualifiedName(AcceleratorDomain + "/" + name)
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"uuid":                  {StringValue: ptr.To(g.uuid)},
		"productName":           {StringValue: ptr.To(g.productName)},
		"architecture":          {StringValue: ptr.To(g.architecture)},
		"index":                 {IntValue: ptr.To(int64(g.index))},
		"minor":                 {IntValue: ptr.To(int64(g.minor))},
		"cudaComputeCapability": {VersionValue: ptr.To(cc)},
		"driverVersion":         {VersionValue: ptr.To(drv)},
		"cudaDriverVersion":     {VersionValue: ptr.To(cuda)},
		q("type"):               {StringValue: ptr.To("gpu")},
		q("vendor"):             {StringValue: ptr.To("nvidia")},
		q("model"):              {StringValue: ptr.To(g.family)},
		q("numaNode"):           {IntValue: ptr.To(int64(g.topology.NUMANode))},
		deviceattribute.StandardDeviceAttributePCIeRoot: {StringValue: ptr.To(g.topology.Root)},
		deviceattribute.StandardDeviceAttributePCIBusID: {StringValue: ptr.To(g.topology.BusID)},
	}
	if g.topology.Switch != "" {
		attrs[q("pcieSwitch")] = resourceapi.DeviceAttribute{StringValue: ptr.To(g.topology.Switch)}
	}
	return attrs, nil
}

// withAttrs copies base and adds the kind, whether the device is a whole
// accelerator, and extra attributes.
func withAttrs(base map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, kind deviceKind, whole bool, extra map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(base)+len(extra)+2)
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	out["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To(string(kind))}
	out[AcceleratorDomain+"/whole"] = resourceapi.DeviceAttribute{BoolValue: ptr.To(whole)}
	return out
}

// partitionAttributes publish, for each NVLink partition size the GPU is
// part of, the partition's id as accelerator.strata.sh/partition<size>, so
// that a claim for N GPUs can require one partition with matchAttribute.
func (g *gpu) partitionAttributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for size, id := range g.partitions {
		out[resourceapi.QualifiedName(fmt.Sprintf("%s/partition%d", AcceleratorDomain, size))] = resourceapi.DeviceAttribute{StringValue: ptr.To(id)}
	}
	return out
}

func bytes(v uint64) resource.Quantity { return *resource.NewQuantity(int64(v), resource.BinarySI) }
