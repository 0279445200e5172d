// Package nvmlmock builds go-nvml mock servers that look like a given
// machine layout: the GPU model, count and PCI addresses of the layout,
// product names as real boards report them, and UUIDs that are stable for
// a node name, so that a simulated node reports the same GPUs every time it
// starts. It adds what go-nvml's mock leaves out and Strata's health
// monitoring needs: an event set that delivers XID and ECC events, GPU-lost
// and ECC error state, and the compute mode.
package nvmlmock

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
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
	// The models of Alibaba's openb trace (openb.go).
	"T4-PCIE-16GB":   teslaT4,
	"P100-PCIE-16GB": teslaP100PCIe16GB,
	"V100-SXM2-16GB": teslaV100SXM216GB,
	"V100-SXM2-32GB": teslaV100SXM232GB,
	"A10-PCIE-24GB":  nvidiaA10,
	"Alibaba-G2":     alibabaG2,
	"Alibaba-G3":     alibabaG3,
}

// ProductName returns the product name NVML reports for a layout's GPU
// model ("V100-SXM2-32GB" → "Tesla V100-SXM2-32GB"), the value of the
// NVIDIA driver's productName attribute, so that a selector can name the
// model without copying the name.
func ProductName(gpuModel string) (string, bool) {
	c, ok := models[gpuModel]
	return c.Name, ok
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

// Server is a mock NVML library for one machine.
type Server struct {
	*server.Server

	mu      sync.Mutex
	sets    []*eventSet
	lost    []bool
	held    []bool
	pending []int
	ecc     []uint64
	compute []nvml.ComputeMode

	// changeMu guards what OnChange watches with.
	changeMu sync.Mutex
	onChange func(State)
	last     State
	wrapped  map[any]bool
}

// New returns a mock NVML server for the machine. seed (normally the node
// name) makes the GPU UUIDs unique per node and stable across restarts.
func New(m hardware.Machine, seed string) (*Server, error) {
	cfg, ok := models[m.GPUModel]
	if !ok {
		return nil, fmt.Errorf("machine %s: no NVML mock for GPU model %q", m.Name, m.GPUModel)
	}
	layout := m.GPUs()
	base, err := server.New(
		server.WithGPUs(gpus.Multiple(len(layout), cfg)...),
		server.WithDriverVersion(DriverVersion),
		server.WithNVMLVersion(NVMLVersion),
		server.WithCUDADriverVersion(CUDADriverVersion),
	)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Server:  base,
		lost:    make([]bool, len(layout)),
		held:    make([]bool, len(layout)),
		pending: make([]int, len(layout)),
		ecc:     make([]uint64, len(layout)),
		compute: make([]nvml.ComputeMode, len(layout)),
	}
	s.EventSetCreateFunc = s.createEventSet
	for i, fn := range layout {
		dev := base.Devices[i].(*server.Device)
		s.patchDevice(i, dev, fn, seed, cfg.PciDeviceId)
		if supportsMIG(cfg) {
			s.pendingMIGMode(i, dev)
		} else {
			disableMIG(dev)
		}
	}
	s.useHandles()
	for i := range layout {
		s.failWhenLost(i, s.Device(i))
	}
	byIndex := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i >= 0 && i < len(layout) && s.isLost(i) {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return byIndex(i)
	}
	return s, nil
}

// pendingMIGMode models NVML's two MIG modes, current and pending
// (nvmlDeviceGetMigMode), and the activation status of a switch
// (nvmlDeviceSetMigMode): the switch takes effect at once unless the GPU
// is held open (SetHeldOpen), when it stays pending and the activation
// status is NVML_ERROR_IN_USE, as NVML documents for "device unbind fails
// because the device isn't idle" (the caller must idle the GPU and retry).
func (s *Server) pendingMIGMode(i int, dev *server.Device) {
	dev.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.pending[i] = mode
		if s.held[i] {
			return nvml.ERROR_IN_USE, nvml.SUCCESS
		}
		dev.Lock()
		dev.MigMode = mode
		dev.Unlock()
		return nvml.SUCCESS, nvml.SUCCESS
	}
	dev.GetMigModeFunc = func() (int, int, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		dev.RLock()
		defer dev.RUnlock()
		return dev.MigMode, s.pending[i], nvml.SUCCESS
	}
}

// SetHeldOpen makes GPU i held open by a process (DCGM, a CUDA job):
// while it is, a MIG mode switch stays pending.
func (s *Server) SetHeldOpen(i int, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[i] = held
}

// returnType is the type of NVML's status results.
var returnType = reflect.TypeOf(nvml.SUCCESS)

// failWhenLost makes every call on GPU i that reports an nvml.Return
// answer ERROR_GPU_IS_LOST while the GPU is lost, with zero values for
// everything else it returns: NVML's documented answer for a GPU that
// fell off the bus (nvmlReturn_t NVML_ERROR_GPU_IS_LOST, "the target GPU
// has fallen off the bus or has otherwise become inaccessible"), which
// nvidia-smi shows as "Unable to determine the device handle for GPU
// <bus id>: GPU is lost". Every function of the mock is wrapped, those
// the plugin calls today and those it may call tomorrow, so a fake can
// never answer a call that the lost GPU would fail. Call it once every
// function is set.
func (s *Server) failWhenLost(i int, dev *server.Device) {
	v := reflect.ValueOf(&dev.Device).Elem()
	for f := 0; f < v.NumField(); f++ {
		field := v.Field(f)
		ft := field.Type()
		if field.Kind() != reflect.Func || field.IsNil() || !field.CanSet() || ft.NumOut() == 0 || ft.Out(ft.NumOut()-1) != returnType {
			continue
		}
		orig := reflect.ValueOf(field.Interface())
		field.Set(reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
			if s.isLost(i) {
				out := make([]reflect.Value, ft.NumOut())
				for k := range out {
					out[k] = reflect.Zero(ft.Out(k))
				}
				out[len(out)-1] = reflect.ValueOf(nvml.ERROR_GPU_IS_LOST)
				return out
			}
			if ft.IsVariadic() {
				return orig.CallSlice(args)
			}
			return orig.Call(args)
		}))
	}
}

// Device returns the mock device of a GPU index.
func (s *Server) Device(i int) *server.Device { return s.Devices[i].(*device).Device }

func (s *Server) patchDevice(i int, dev *server.Device, fn hardware.PCIFunction, seed string, pciDeviceID uint32) {
	dev.PciBusID = fn.BusID()
	dev.UUID = "GPU-" + uuid.NewSHA1(uuidSpace, []byte(fmt.Sprintf("%s/%d", seed, i))).String()
	info := pciInfo(fn.BusID(), pciDeviceID)
	dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return info, nvml.SUCCESS }

	memoryInfo := dev.GetMemoryInfoFunc
	dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if s.isLost(i) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return memoryInfo()
	}
	dev.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.lost[i] {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		if t == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
			return s.ecc[i], nvml.SUCCESS
		}
		return 0, nvml.SUCCESS
	}
	dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	dev.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
		es, ok := set.(*eventSet)
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		// Events name the handle NVML hands out (see useHandles).
		es.register(s.Devices[i], types)
		return nvml.SUCCESS
	}
	dev.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.compute[i], nvml.SUCCESS
	}
	dev.SetComputeModeFunc = func(m nvml.ComputeMode) nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.compute[i] = m
		return nvml.SUCCESS
	}
	// Like the driver, hand out the lowest free GPU instance id (go-nvml's
	// mock counts up forever), refuse instances outside MIG mode and
	// placements that overlap an existing instance.
	dev.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		dev.Lock()
		defer dev.Unlock()
		if dev.MigMode != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		used := map[uint32]bool{}
		for gi := range dev.GpuInstances {
			used[gi.Info.Id] = true
			p := gi.Info.Placement
			if placement.Start < p.Start+p.Size && p.Start < placement.Start+placement.Size {
				return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
			}
		}
		id := uint32(0)
		for used[id] {
			id++
		}
		gi := server.NewGpuInstanceFromInfo(nvml.GpuInstanceInfo{Device: dev, Id: id, ProfileId: info.Id, Placement: *placement}, dev.Config.MIGProfiles)
		dev.GpuInstances[gi] = struct{}{}
		return gi, nvml.SUCCESS
	}
	dev.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		dev.RLock()
		defer dev.RUnlock()
		for gi := range dev.GpuInstances {
			if int(gi.Info.Id) == id {
				return gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
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

// MIGInstances returns the number of GPU instances that exist on each GPU.
func (s *Server) MIGInstances() []int {
	out := make([]int, len(s.Devices))
	for i := range s.Devices {
		d := s.Device(i)
		d.RLock()
		out[i] = len(d.GpuInstances)
		d.RUnlock()
	}
	return out
}

// ComputeMode returns the compute mode of a GPU.
func (s *Server) ComputeMode(i int) nvml.ComputeMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compute[i]
}

var _ nvml.EventSet = (*eventSet)(nil)

// eventSet delivers injected events for the devices registered with it.
type eventSet struct {
	mock.EventSet
	mu      sync.Mutex
	devices map[nvml.Device]uint64
	events  chan nvml.EventData
}

func (s *Server) createEventSet() (nvml.EventSet, nvml.Return) {
	es := &eventSet{devices: map[nvml.Device]uint64{}, events: make(chan nvml.EventData, 64)}
	es.WaitFunc = es.wait
	es.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	s.mu.Lock()
	s.sets = append(s.sets, es)
	s.mu.Unlock()
	return es, nvml.SUCCESS
}

func (es *eventSet) register(dev nvml.Device, types uint64) {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.devices[dev] |= types
}

func (es *eventSet) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	select {
	case ev := <-es.events:
		return ev, nvml.SUCCESS
	case <-timeAfterMs(timeoutMs):
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

// emit delivers an event to every set that registered for it.
func (s *Server) emit(i int, eventType, data uint64) {
	dev := s.Devices[i]
	s.mu.Lock()
	sets := append([]*eventSet(nil), s.sets...)
	s.mu.Unlock()
	for _, es := range sets {
		es.mu.Lock()
		want := es.devices[dev]&eventType != 0
		es.mu.Unlock()
		if want {
			es.events <- nvml.EventData{Device: dev, EventType: eventType, EventData: data}
		}
	}
}

// InjectXID raises an XID error on GPU i, as the driver reports it.
func (s *Server) InjectXID(i int, xid uint64) {
	s.emit(i, nvml.EventTypeXidCriticalError, xid)
}

// SetUncorrectableECC sets GPU i's volatile uncorrectable ECC count; a
// non-zero count also raises a double-bit ECC event. Zero models a GPU
// reset.
func (s *Server) SetUncorrectableECC(i int, n uint64) {
	s.mu.Lock()
	s.ecc[i] = n
	s.mu.Unlock()
	if n > 0 {
		s.emit(i, nvml.EventTypeDoubleBitEccError, n)
	}
}

// SetLost makes GPU i fall off the bus (every query returns
// ERROR_GPU_IS_LOST), or come back.
func (s *Server) SetLost(i int, lost bool) {
	s.mu.Lock()
	s.lost[i] = lost
	s.mu.Unlock()
	if lost {
		s.emit(i, nvml.EventTypeXidCriticalError, 79)
	}
}

func (s *Server) isLost(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost[i]
}
