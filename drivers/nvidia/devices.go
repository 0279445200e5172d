package nvidia

import (
	"fmt"
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/accelerator"
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
	// existing is set for a MIG device that is an instance the plugin did
	// not make (static mode, or an unrecorded instance in dynamic mode):
	// the plugin uses it as it is and never destroys it.
	existing *migInstance
}

// counterSetName names the counter set of a GPU.
func counterSetName(g *gpu) string { return g.name }

// Counter names: one counter per memory slice, so that overlapping MIG
// placements exclude each other, and a total per scarce resource.
const (
	counterMemory          = "memory-mib"
	counterMultiprocessors = "multiprocessors"
	counterDecoders        = "decoders"
	counterEncoders        = "encoders"
	counterJPEG            = "jpeg-engines"
	counterOFA             = "ofa-engines"
)

func memorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// profileResources returns what a profile takes of each resource a
// counter may track, by counter name.
func profileResources(info nvml.GpuInstanceProfileInfo) map[string]uint64 {
	return map[string]uint64{
		counterMemory:          info.MemorySizeMB,
		counterMultiprocessors: uint64(info.MultiprocessorCount),
		counterDecoders:        uint64(info.DecoderCount),
		counterEncoders:        uint64(info.EncoderCount),
		counterJPEG:            uint64(info.JpegCount),
		counterOFA:             uint64(info.OfaCount),
	}
}

// scarceResources are the resources that placements which fit by memory
// slices could still oversubscribe: those the densest profile, filling
// every memory slice, would need more of than the GPU has. Only they need
// counters. On NVIDIA's own placement tables memory and compute follow
// from the memory slices and only the media engines (JPEG, OFA, and
// decoders on an A100) are scarce; the check makes no assumption.
// Computed once at discovery into migCapability.scarce.
func (c *migCapability) scarceResources() map[string]int64 {
	out := map[string]int64{}
	for name, total := range profileResources(c.totals) {
		demand := 0.0
		for _, p := range c.profiles {
			if n := profileResources(p.info)[name]; n > 0 {
				size := float64(placementSize(p))
				demand = max(demand, float64(n)*float64(c.memorySlices)/size)
			}
		}
		if demand > float64(total) {
			out[name] = int64(total)
		}
	}
	return out
}

// placementSize is the number of memory slices a profile's instances
// take.
func placementSize(p *migProfile) uint32 {
	if len(p.placements) > 0 && p.placements[0].Size > 0 {
		return p.placements[0].Size
	}
	return 1
}

// gpuCounters is everything a GPU has: the whole GPU device consumes all
// of it, so it excludes every MIG placement. Foreign instances (made by
// someone else) are taken off, so that placements overlapping them and
// the whole GPU cannot be allocated while they exist.
func gpuCounters(g *gpu, foreign []migInstance) (available, all map[string]resourceapi.Counter) {
	available, all = map[string]resourceapi.Counter{}, map[string]resourceapi.Counter{}
	used := map[int]bool{}
	left := maps.Clone(g.mig.scarce)
	for _, f := range foreign {
		for i := f.placement.Start; i < f.placement.Start+f.placement.Size; i++ {
			used[int(i)] = true
		}
		for name := range left {
			left[name] -= int64(profileResources(f.profile.info)[name])
		}
	}
	for name, n := range g.mig.scarce {
		all[name] = quantity(n)
		available[name] = quantity(max(left[name], 0))
	}
	for i := 0; i < g.mig.memorySlices; i++ {
		all[memorySliceCounter(i)] = quantity(1)
		if used[i] {
			available[memorySliceCounter(i)] = quantity(0)
		} else {
			available[memorySliceCounter(i)] = quantity(1)
		}
	}
	return available, all
}

// migCounters is what one MIG placement consumes.
func migCounters(g *gpu, p *migProfile, pl nvml.GpuInstancePlacement) map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{}
	for i := int(pl.Start); i < int(pl.Start+pl.Size); i++ {
		c[memorySliceCounter(i)] = quantity(1)
	}
	for name := range g.mig.scarce {
		if n := profileResources(p.info)[name]; n > 0 {
			c[name] = quantity(int64(n))
		}
	}
	return c
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

// gpuView is what discovery found on one GPU now: whether it is in MIG
// mode, and the instances that are not the plugin's own (dynamic mode
// owns those on placements its checkpoint records).
type gpuView struct {
	migEnabled bool
	foreign    []migInstance
}

// buildDevices lays out the node's GPUs.
//
// Static MIG mode: a GPU outside MIG mode is one device with consumable
// capacity (cores and memory), used whole or shared; a GPU in MIG mode is
// its existing instances, one device each. Nothing draws on counters.
//
// Dynamic MIG mode: each MIG-capable GPU also gets a counter set and one
// device per MIG placement; the GPU device consumes every counter in full
// (once, however many shares it has), so a GPU is used whole/shared or as
// MIG instances, never both. Instances the plugin did not make are left
// alone: their slices are taken off the counter set and the placements
// overlapping them are not offered.
//
// MIG devices carry fewer attributes than GPUs: every published device
// costs the scheduler's allocator on every node it considers, and MIG
// placements are most of a dynamic node's devices (docs/nvidia.md).
func buildDevices(gpus []*gpu, views map[string]gpuView, taints map[string][]resourceapi.DeviceTaint, mode MIGMode) (*deviceSet, error) {
	set := &deviceSet{byName: map[string]*device{}}
	var migs []resourceapi.Device
	for _, g := range gpus {
		base, err := baseAttributes(g)
		if err != nil {
			return nil, fmt.Errorf("GPU %s: %w", g.name, err)
		}
		view := views[g.name]
		gpuTaints := taints[g.name]
		if mode == MIGStatic && view.migEnabled {
			for _, inst := range view.foreign {
				if !inst.hasCI {
					continue // holds its slices but cannot run work
				}
				migs = append(migs, migDevice(g, inst.profile, inst.placement, gpuTaints))
				set.add(&device{name: migDeviceName(g, inst.profile, inst.placement), kind: kindMIG, gpu: g, profile: inst.profile, placement: inst.placement, existing: &inst})
			}
			continue
		}
		dev := gpuDevice(g, base, gpuTaints)
		set.add(&device{name: g.name, kind: kindGPU, gpu: g})
		if mode == MIGStatic || g.mig == nil {
			set.devices = append(set.devices, dev)
			continue
		}
		available, all := gpuCounters(g, view.foreign)
		set.counters = append(set.counters, resourceapi.CounterSet{Name: counterSetName(g), Counters: available})
		dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(g), Counters: all}}
		set.devices = append(set.devices, dev)
		for _, p := range g.mig.profiles {
			for _, pl := range p.placements {
				if slices.ContainsFunc(view.foreign, func(f migInstance) bool { return overlaps(f.placement, pl) }) {
					continue
				}
				d := migDevice(g, p, pl, gpuTaints)
				d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(g), Counters: migCounters(g, p, pl)}}
				migs = append(migs, d)
				set.add(&device{name: d.Name, kind: kindMIG, gpu: g, profile: p, placement: pl})
			}
		}
	}
	set.devices = append(set.devices, migs...)
	return set, nil
}

// gpuDevice is a whole GPU with consumable capacity: a claim that asks
// for no capacity gets all of its memory, which no other claim can then
// share; a claim asking for memory shares it. Compute is reserved only
// when asked for (default 0 cores): a claim that asks only for memory
// shares compute, limited at run time as its opaque config says.
func gpuDevice(g *gpu, base map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, taints []resourceapi.DeviceTaint) resourceapi.Device {
	attrs := maps.Clone(base)
	g.accel(true, int64(g.memoryBytes)).AddAttributes(attrs)
	return resourceapi.Device{
		Name:                     g.name,
		Attributes:               attrs,
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"cores": {
				Value:         *resource.NewQuantity(sharedCores, resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(0, resource.DecimalSI), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(0, resource.DecimalSI), Step: resource.NewQuantity(1, resource.DecimalSI)}},
			},
			"memory": {
				Value:         bytes(g.memoryBytes),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(bytes(g.memoryBytes)), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(memoryStepSize, resource.BinarySI), Step: resource.NewQuantity(memoryStepSize, resource.BinarySI)}},
			},
		},
		Taints: taints,
	}
}

// migDevice is one MIG placement (or existing instance) of a GPU.
func migDevice(g *gpu, p *migProfile, pl nvml.GpuInstancePlacement, taints []resourceapi.DeviceTaint) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":           {StringValue: ptr.To(string(kindMIG))},
		"profile":        {StringValue: ptr.To(p.name)},
		"productName":    {StringValue: ptr.To(g.productName)},
		"parentUUID":     {StringValue: ptr.To(g.uuid)},
		"placementStart": {IntValue: ptr.To(int64(pl.Start))},
		"placementSize":  {IntValue: ptr.To(int64(pl.Size))},
	}
	g.accel(false, int64(p.info.MemorySizeMB)<<20).AddAttributes(attrs)
	return resourceapi.Device{
		Name:       migDeviceName(g, p, pl),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory":          {Value: bytes(uint64(p.info.MemorySizeMB) << 20)},
			"multiprocessors": {Value: *resource.NewQuantity(int64(p.info.MultiprocessorCount), resource.DecimalSI)},
		},
		Taints: taints,
	}
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
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                  {StringValue: ptr.To(string(kindGPU))},
		"uuid":                  {StringValue: ptr.To(g.uuid)},
		"productName":           {StringValue: ptr.To(g.productName)},
		"architecture":          {StringValue: ptr.To(g.architecture)},
		"index":                 {IntValue: ptr.To(int64(g.index))},
		"minor":                 {IntValue: ptr.To(int64(g.minor))},
		"cudaComputeCapability": {VersionValue: ptr.To(cc)},
		"driverVersion":         {VersionValue: ptr.To(drv)},
		"cudaDriverVersion":     {VersionValue: ptr.To(cuda)},
	}, nil
}

// accel is the vendor-neutral description of a GPU or of a partition of
// it (whole false).
func (g *gpu) accel(whole bool, memoryBytes int64) accelerator.Device {
	d := accelerator.Device{
		Type: accelerator.GPU, Vendor: "nvidia", Model: g.family, Whole: whole, MemoryBytes: memoryBytes,
		Topology: g.topology, OwnPCIFunction: whole,
	}
	if whole {
		d.Partitions = g.partitions
	}
	return d
}

func bytes(v uint64) resource.Quantity { return *resource.NewQuantity(int64(v), resource.BinarySI) }
