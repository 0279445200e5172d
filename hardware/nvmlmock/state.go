package nvmlmock

import (
	"reflect"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// State is what the GPUs of a server keep while the host is up, whoever
// talks to them: each GPU's MIG mode and compute mode and the MIG
// instances made on it, with their ids. A simulated node saves it on
// every change and restores it when its plugin starts again, so that a
// plugin restart finds the instances it made, as on real hardware; a
// reboot starts from none.
type State struct {
	GPUs []GPUState `json:"gpus"`
}

// GPUState is one GPU's part of State.
type GPUState struct {
	MIGMode     int                `json:"migMode"`
	ComputeMode nvml.ComputeMode   `json:"computeMode,omitempty"`
	Instances   []GPUInstanceState `json:"instances,omitempty"`
}

// GPUInstanceState is a MIG GPU instance: its id, profile id, placement
// and compute instances.
type GPUInstanceState struct {
	ID      uint32                 `json:"id"`
	Profile uint32                 `json:"profile"`
	Start   uint32                 `json:"start"`
	Size    uint32                 `json:"size"`
	Compute []ComputeInstanceState `json:"compute,omitempty"`
}

// ComputeInstanceState is a compute instance of a GPU instance.
type ComputeInstanceState struct {
	ID      uint32 `json:"id"`
	Profile uint32 `json:"profile"`
}

// State returns the GPUs' state now.
func (s *Server) State() State {
	var st State
	for i := range s.Devices {
		dev := s.Device(i)
		s.mu.Lock()
		g := GPUState{ComputeMode: s.compute[i]}
		s.mu.Unlock()
		dev.RLock()
		g.MIGMode = dev.MigMode
		for gi := range dev.GpuInstances {
			inst := GPUInstanceState{ID: gi.Info.Id, Profile: gi.Info.ProfileId, Start: gi.Info.Placement.Start, Size: gi.Info.Placement.Size}
			gi.RLock()
			for ci := range gi.ComputeInstances {
				inst.Compute = append(inst.Compute, ComputeInstanceState{ID: ci.Info.Id, Profile: ci.Info.ProfileId})
			}
			gi.RUnlock()
			sort.Slice(inst.Compute, func(a, b int) bool { return inst.Compute[a].ID < inst.Compute[b].ID })
			g.Instances = append(g.Instances, inst)
		}
		dev.RUnlock()
		sort.Slice(g.Instances, func(a, b int) bool { return g.Instances[a].ID < g.Instances[b].ID })
		st.GPUs = append(st.GPUs, g)
	}
	return st
}

// Restore puts the GPUs in st's state, ids included. Call it before the
// server is used; GPUs beyond st's are left as they are.
func (s *Server) Restore(st State) {
	for i, g := range st.GPUs {
		if i >= len(s.Devices) {
			break
		}
		dev := s.Device(i)
		s.mu.Lock()
		s.compute[i] = g.ComputeMode
		s.pending[i] = g.MIGMode
		s.mu.Unlock()
		dev.Lock()
		dev.MigMode = g.MIGMode
		dev.GpuInstances = map[*server.GpuInstance]struct{}{}
		for _, in := range g.Instances {
			gi := server.NewGpuInstanceFromInfo(nvml.GpuInstanceInfo{
				Device: dev, Id: in.ID, ProfileId: in.Profile,
				Placement: nvml.GpuInstancePlacement{Start: in.Start, Size: in.Size},
			}, dev.Config.MIGProfiles)
			for _, c := range in.Compute {
				ci := server.NewComputeInstanceFromInfo(nvml.ComputeInstanceInfo{Device: dev, GpuInstance: gi, Id: c.ID, ProfileId: c.Profile})
				gi.ComputeInstances[ci] = struct{}{}
				gi.ComputeInstanceCounter = max(gi.ComputeInstanceCounter, c.ID+1)
			}
			dev.GpuInstances[gi] = struct{}{}
			dev.GpuInstanceCounter = max(dev.GpuInstanceCounter, in.ID+1)
		}
		dev.Unlock()
	}
}

// OnChange calls fn with the new state after every call that changed it:
// any GPU call (a MIG mode or compute mode set, an instance made) and the
// destruction or creation of instances through an instance. Call it once,
// after New, before the server is used.
func (s *Server) OnChange(fn func(State)) {
	s.changeMu.Lock()
	s.onChange, s.last = fn, s.State()
	for i := range s.Devices {
		afterEachCall(&s.Device(i).Device, s.checkChange)
	}
	s.watchInstances()
	s.changeMu.Unlock()
}

func (s *Server) checkChange() {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.watchInstances()
	if now := s.State(); !reflect.DeepEqual(now, s.last) {
		s.last = now
		s.onChange(now)
	}
}

// watchInstances makes the calls of every GPU and compute instance not
// yet watched (Destroy, CreateComputeInstance) check for a change.
func (s *Server) watchInstances() {
	after := s.checkChange
	if s.wrapped == nil {
		s.wrapped = map[any]bool{}
	}
	for i := range s.Devices {
		dev := s.Device(i)
		dev.RLock()
		var gis []*server.GpuInstance
		for gi := range dev.GpuInstances {
			gis = append(gis, gi)
		}
		dev.RUnlock()
		for _, gi := range gis {
			if !s.wrapped[gi] {
				s.wrapped[gi] = true
				afterEachCall(&gi.GpuInstance, after)
			}
			gi.RLock()
			var cis []*server.ComputeInstance
			for ci := range gi.ComputeInstances {
				cis = append(cis, ci)
			}
			gi.RUnlock()
			for _, ci := range cis {
				if !s.wrapped[ci] {
					s.wrapped[ci] = true
					afterEachCall(&ci.ComputeInstance, after)
				}
			}
		}
	}
}

// afterEachCall makes every function field of the go-nvml mock struct at
// ptr call after once it returned.
func afterEachCall(ptr any, after func()) {
	v := reflect.ValueOf(ptr).Elem()
	for f := 0; f < v.NumField(); f++ {
		field := v.Field(f)
		if field.Kind() != reflect.Func || field.IsNil() || !field.CanSet() {
			continue
		}
		ft := field.Type()
		orig := reflect.ValueOf(field.Interface())
		field.Set(reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
			var out []reflect.Value
			if ft.IsVariadic() {
				out = orig.CallSlice(args)
			} else {
				out = orig.Call(args)
			}
			after()
			return out
		}))
	}
}
