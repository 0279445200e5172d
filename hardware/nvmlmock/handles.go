package nvmlmock

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// go-nvml's mocks record the arguments of every call so that tests can
// assert on them, and never let go of them. A plugin polls its GPUs for
// health and MIG layout changes several times a second, so on a
// simulated cluster left running (thousands of nodes, or one node for
// hours) those records grow without bound: about a gigabyte within
// minutes on a thousand DGX nodes. The handles below answer the calls a
// plugin repeats straight from the mock's functions, without recording;
// every other call falls through to the mock.

// device is the handle NVML hands out for a GPU.
type device struct {
	*server.Device
}

var _ nvml.Device = (*device)(nil)

func (d *device) GetMemoryInfo() (nvml.Memory, nvml.Return) { return d.GetMemoryInfoFunc() }

func (d *device) GetTotalEccErrors(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
	return d.GetTotalEccErrorsFunc(t, c)
}

func (d *device) GetMigMode() (int, int, nvml.Return) { return d.GetMigModeFunc() }

func (d *device) GetGpuInstanceProfileInfo(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	return d.GetGpuInstanceProfileInfoFunc(profile)
}

func (d *device) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	gis, ret := d.GetGpuInstancesFunc(info)
	for i, gi := range gis {
		if g, ok := gi.(*server.GpuInstance); ok {
			gis[i] = &gpuInstance{g}
		}
	}
	return gis, ret
}

func (d *device) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	gi, ret := d.GetGpuInstanceByIdFunc(id)
	if g, ok := gi.(*server.GpuInstance); ok {
		return &gpuInstance{g}, ret
	}
	return gi, ret
}

// gpuInstance is the handle of a MIG GPU instance.
type gpuInstance struct {
	*server.GpuInstance
}

var _ nvml.GpuInstance = (*gpuInstance)(nil)

func (g *gpuInstance) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) { return g.GetInfoFunc() }

func (g *gpuInstance) GetComputeInstanceProfileInfo(profile, engine int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	return g.GetComputeInstanceProfileInfoFunc(profile, engine)
}

func (g *gpuInstance) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	cis, ret := g.GetComputeInstancesFunc(info)
	for i, ci := range cis {
		if c, ok := ci.(*server.ComputeInstance); ok {
			cis[i] = &computeInstance{c}
		}
	}
	return cis, ret
}

// computeInstance is the handle of a MIG compute instance.
type computeInstance struct {
	*server.ComputeInstance
}

var _ nvml.ComputeInstance = (*computeInstance)(nil)

func (c *computeInstance) GetInfo() (nvml.ComputeInstanceInfo, nvml.Return) { return c.GetInfoFunc() }

// Wait replaces the mock's recording Wait: a plugin waits on its event
// set in a loop.
func (es *eventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) { return es.wait(timeoutMs) }

// useHandles makes NVML hand out the non-recording handles. The server
// keeps them in Devices, so that a handle is the same value however it
// was obtained (events are matched to GPUs by handle).
func (s *Server) useHandles() {
	for i, d := range s.Devices {
		s.Devices[i] = &device{d.(*server.Device)}
	}
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for i, d := range s.Devices {
			if s.Device(i).UUID == uuid {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	s.DeviceGetHandleByPciBusIdFunc = func(busID string) (nvml.Device, nvml.Return) {
		for i, d := range s.Devices {
			if s.Device(i).PciBusID == busID {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
}
