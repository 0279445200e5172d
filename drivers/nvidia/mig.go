package nvidia

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// migProfile is one GPU instance profile with its possible placements, as
// NVML reports them.
type migProfile struct {
	id   int
	name string // "1g.10gb", "1g.10gb+me"
	info nvml.GpuInstanceProfileInfo
	// ciProfile is the compute instance profile that spans the whole GPU
	// instance; Strata creates one such compute instance per instance.
	ciProfile  int
	placements []nvml.GpuInstancePlacement
}

// migCapability is what a MIG-capable GPU offers.
type migCapability struct {
	profiles []*migProfile
	// memorySlices is the number of memory slices placements refer to.
	memorySlices int
	// totals are the GPU's engines: for each engine the most that any
	// profile's maximum number of instances uses together.
	totals nvml.GpuInstanceProfileInfo
	// scarce are the totals of the resources that need counters.
	scarce map[string]int64
}

// MIGMode says who manages the MIG instances of a node's GPUs.
type MIGMode string

// MIG modes.
const (
	// MIGStatic (the default): an operator or a MIG manager made the
	// instances. The plugin publishes the instances that exist, never
	// creates or destroys one and never switches MIG mode; a GPU in MIG
	// mode is offered only as its instances.
	MIGStatic MIGMode = "static"
	// MIGDynamic: the plugin publishes every placement of every profile,
	// creates an instance when a claim is prepared and destroys it when
	// the claim is unprepared. Instances it did not record are left alone,
	// and the placements they overlap are not offered.
	MIGDynamic MIGMode = "dynamic"
)

// ParseMIGMode reads a MIG mode; empty means static.
func ParseMIGMode(s string) (MIGMode, error) {
	switch MIGMode(s) {
	case "", MIGStatic:
		return MIGStatic, nil
	case MIGDynamic:
		return MIGDynamic, nil
	}
	return "", fmt.Errorf("MIG mode %q is neither %s nor %s", s, MIGStatic, MIGDynamic)
}

// migInstance is a GPU instance that exists on a GPU, with the compute
// instance spanning it; hasCI is false for one without (a MIG manager or
// a prepare interrupted between the two), which cannot run work.
type migInstance struct {
	profile   *migProfile
	placement nvml.GpuInstancePlacement
	gi, ci    uint32
	hasCI     bool
}

// migEnabled reports whether a GPU is in MIG mode now.
func migEnabled(g *gpu) (bool, error) {
	if g.mig == nil {
		return false, nil
	}
	current, _, ret := g.handle.GetMigMode()
	if ret != nvml.SUCCESS {
		return false, nvmlError("get MIG mode of "+g.name, ret)
	}
	return current == nvml.DEVICE_MIG_ENABLE, nil
}

// listInstances reads the GPU instances that exist on a GPU, in
// placement order, each with its first compute instance.
func listInstances(g *gpu) ([]migInstance, error) {
	var out []migInstance
	var err error
	for _, p := range g.mig.profiles {
		info := p.info
		gis, ret := g.handle.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, nvmlError("list MIG instances of "+g.name, ret)
		}
		for _, gi := range gis {
			giInfo, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, nvmlError("read MIG instance", ret)
			}
			inst := migInstance{profile: p, placement: giInfo.Placement, gi: giInfo.Id}
			if inst.ci, inst.hasCI, err = firstComputeInstance(gi); err != nil {
				return nil, fmt.Errorf("GPU %s instance %d: %w", g.name, giInfo.Id, err)
			}
			out = append(out, inst)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].placement.Start < out[j].placement.Start })
	return out, nil
}

// firstComputeInstance returns the id of a GPU instance's compute
// instance, if it has one.
func firstComputeInstance(gi nvml.GpuInstance) (uint32, bool, error) {
	for id := nvml.COMPUTE_INSTANCE_PROFILE_COUNT - 1; id >= 0; id-- {
		info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS || len(cis) == 0 {
			continue
		}
		ci, ret := cis[0].GetInfo()
		if ret != nvml.SUCCESS {
			return 0, false, nvmlError("read compute instance", ret)
		}
		return ci.Id, true, nil
	}
	return 0, false, nil
}

// overlaps reports whether two placements share a memory slice.
func overlaps(a, b nvml.GpuInstancePlacement) bool {
	return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size
}

// discoverMIG reads the GPU instance profiles and placements from NVML.
// A GPU without MIG support yields nil.
func discoverMIG(dev nvml.Device) (*migCapability, error) {
	c := &migCapability{}
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("get MIG profile %d", id), ret)
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("get placements of MIG profile %d", id), ret)
		}
		if len(placements) == 0 {
			continue
		}
		p := &migProfile{id: id, name: profileName(id, info), info: info, ciProfile: -1, placements: placements}
		c.profiles = append(c.profiles, p)
		for _, pl := range placements {
			c.memorySlices = max(c.memorySlices, int(pl.Start+pl.Size))
		}
		c.addTotals(info)
	}
	if len(c.profiles) == 0 {
		return nil, nil
	}
	sort.Slice(c.profiles, func(i, j int) bool { return c.profiles[i].id < c.profiles[j].id })
	c.scarce = c.scarceResources()
	return c, nil
}

// profileName renders a profile the way nvidia-smi names it: compute
// slices, memory rounded up to GB, and "+me" for media-extension variants.
func profileName(id int, info nvml.GpuInstanceProfileInfo) string {
	gb := (info.MemorySizeMB + 1023) / 1024
	suffix := ""
	switch id {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		suffix = "+me"
	}
	return fmt.Sprintf("%dg.%dgb%s", info.SliceCount, gb, suffix)
}

// migDeviceName is the DRA name of a placement: "gpu-0-mig-1g10gbme-3".
func migDeviceName(g *gpu, p *migProfile, pl nvml.GpuInstancePlacement) string {
	compact := strings.NewReplacer(".", "", "+", "").Replace(p.name)
	return fmt.Sprintf("%s-mig-%s-%d", g.name, compact, pl.Start)
}

func (c *migCapability) addTotals(info nvml.GpuInstanceProfileInfo) {
	n := max(info.InstanceCount, 1)
	t := &c.totals
	t.MultiprocessorCount = max(t.MultiprocessorCount, info.MultiprocessorCount*n)
	t.CopyEngineCount = max(t.CopyEngineCount, info.CopyEngineCount*n)
	t.DecoderCount = max(t.DecoderCount, info.DecoderCount*n)
	t.EncoderCount = max(t.EncoderCount, info.EncoderCount*n)
	t.JpegCount = max(t.JpegCount, info.JpegCount*n)
	t.OfaCount = max(t.OfaCount, info.OfaCount*n)
	t.MemorySizeMB = max(t.MemorySizeMB, info.MemorySizeMB*uint64(n))
}
