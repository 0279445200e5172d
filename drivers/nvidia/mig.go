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
}
