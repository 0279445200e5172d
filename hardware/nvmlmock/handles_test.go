package nvmlmock

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/strata-sh/strata/hardware"
)

// TestPolledCallsAreNotRecorded: what a plugin polls (health, MIG layout)
// leaves no record in go-nvml's mock, and the handle is the same however
// it is looked up.
func TestPolledCallsAreNotRecorded(t *testing.T) {
	s, err := New(hardware.DGXH100(), "node-0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyMIGConfig(0, map[string]int{"3g.40gb": 2}); err != nil {
		t.Fatal(err)
	}
	dev, ret := s.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for range 100 {
		dev.GetMemoryInfo()
		dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		dev.GetMigMode()
		for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
			info, ret := dev.GetGpuInstanceProfileInfo(id)
			if ret != nvml.SUCCESS {
				continue
			}
			gis, _ := dev.GetGpuInstances(&info)
			for _, gi := range gis {
				gi.GetInfo()
				ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != nvml.SUCCESS {
					t.Fatalf("compute instance profile: %v", nvml.ErrorString(ret))
				}
				cis, _ := gi.GetComputeInstances(&ciInfo)
				if len(cis) != 1 {
					t.Fatalf("%d compute instances, want 1", len(cis))
				}
				cis[0].GetInfo()
			}
		}
	}
	m := s.Device(0)
	recorded := len(m.GetMemoryInfoCalls()) + len(m.GetTotalEccErrorsCalls()) + len(m.GetMigModeCalls()) +
		len(m.GetGpuInstanceProfileInfoCalls()) + len(m.GetGpuInstancesCalls())
	if recorded != 0 {
		t.Errorf("%d polled calls recorded by the mock, want 0", recorded)
	}
	for _, lookup := range []func() (nvml.Device, nvml.Return){
		func() (nvml.Device, nvml.Return) { return s.DeviceGetHandleByUUID(m.UUID) },
		func() (nvml.Device, nvml.Return) { return s.DeviceGetHandleByPciBusId(m.PciBusID) },
	} {
		if got, ret := lookup(); ret != nvml.SUCCESS || got != dev {
			t.Errorf("lookup returned %v (%v), want the handle of index 0", got, nvml.ErrorString(ret))
		}
	}
}
