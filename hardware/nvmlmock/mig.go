package nvmlmock

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ApplyMIGConfig does to GPU i what a MIG manager (such as mig-parted)
// does for an operator: it enables MIG mode and creates the named
// instances — profile name as nvidia-smi prints it ("1g.10gb",
// "3g.40gb") to count — largest first, each at its first free placement,
// with one compute instance spanning it.
func (s *Server) ApplyMIGConfig(i int, devices map[string]int) error {
	dev := s.Devices[i]
	// go-nvml returns the activation status first and the call's result
	// second; either failing leaves the GPU outside MIG mode.
	if status, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS || status != nvml.SUCCESS {
		if ret == nvml.SUCCESS {
			ret = status
		}
		return fmt.Errorf("GPU %d: enable MIG mode: %s", i, nvml.ErrorString(ret))
	}
	profiles := map[string]nvml.GpuInstanceProfileInfo{}
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret == nvml.SUCCESS {
			profiles[migProfileName(id, info)] = info
		}
	}
	names := make([]string, 0, len(devices))
	for name := range devices {
		if _, ok := profiles[name]; !ok {
			known := make([]string, 0, len(profiles))
			for n := range profiles {
				known = append(known, n)
			}
			sort.Strings(known)
			return fmt.Errorf("GPU %d: no MIG profile %q; the GPU has %v", i, name, known)
		}
		names = append(names, name)
	}
	sort.Slice(names, func(a, b int) bool { return profiles[names[a]].SliceCount > profiles[names[b]].SliceCount })
	for _, name := range names {
		info := profiles[name]
		for n := 0; n < devices[name]; n++ {
			if err := createFirstFit(dev, info); err != nil {
				return fmt.Errorf("GPU %d: instance %d of %s: %w", i, n+1, name, err)
			}
		}
	}
	return nil
}

func createFirstFit(dev nvml.Device, info nvml.GpuInstanceProfileInfo) error {
	placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("placements: %s", nvml.ErrorString(ret))
	}
	for _, pl := range placements {
		gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl)
		if ret == nvml.ERROR_INSUFFICIENT_RESOURCES {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("create: %s", nvml.ErrorString(ret))
		}
		for id := nvml.COMPUTE_INSTANCE_PROFILE_COUNT - 1; id >= 0; id-- {
			ci, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if ret == nvml.SUCCESS && ci.SliceCount == info.SliceCount {
				if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
					return fmt.Errorf("create compute instance: %s", nvml.ErrorString(ret))
				}
				return nil
			}
		}
		return fmt.Errorf("no compute instance profile spans %d slices", info.SliceCount)
	}
	return fmt.Errorf("no free placement")
}

// migProfileName renders a profile as nvidia-smi names it.
func migProfileName(id int, info nvml.GpuInstanceProfileInfo) string {
	suffix := ""
	if slices.Contains([]int{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1}, id) {
		suffix = "+me"
	}
	return fmt.Sprintf("%dg.%dgb%s", info.SliceCount, (info.MemorySizeMB+1023)/1024, suffix)
}

// TimeSlices records the time slice nvidia-smi compute-policy would set on
// each GPU, by UUID; it implements the NVIDIA backend's TimeSliceControl.
type TimeSlices struct {
	mu     sync.Mutex
	slices map[string]int
}

// NewTimeSlices returns a recorder with every GPU at the default (0).
func NewTimeSlices() *TimeSlices {
	return &TimeSlices{slices: map[string]int{}}
}

// SetTimeSlice records n for the GPU.
func (t *TimeSlices) SetTimeSlice(_ context.Context, gpuUUID string, n int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n < 0 || n > 3 {
		return fmt.Errorf("nvidia-smi: invalid time slice %d", n)
	}
	t.slices[gpuUUID] = n
	return nil
}

// Get returns the time slice of a GPU.
func (t *TimeSlices) Get(gpuUUID string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.slices[gpuUUID]
}
