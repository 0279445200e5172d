package nvidia

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// Taint keys Strata puts on devices of an unhealthy GPU. A GPU's taints
// also go on its MIG and shared devices.
const (
	TaintGPULost = DriverName + "/gpu-lost"
	// TaintUnreadable is on a GPU that NVML cannot query for another
	// reason than being lost: the plugin cannot tell its MIG layout.
	TaintUnreadable = DriverName + "/unreadable"
	TaintECC        = DriverName + "/ecc-uncorrectable"
	TaintXID        = DriverName + "/xid"
)

// applicationXIDs are XID errors caused by the workload, not the GPU
// (illegal memory access, MMU faults, ...). They do not make a GPU
// unhealthy.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// xidGPULost is "GPU has fallen off the bus".
const xidGPULost = 79

// gpuHealth is what is wrong with one GPU.
type gpuHealth struct {
	lost bool
	// unreadable is set while the GPU's MIG state cannot be read.
	unreadable bool
	ecc        uint64
	xid        uint64
	xidSeen    time.Time
}

func (h gpuHealth) healthy() bool { return !h.lost && !h.unreadable && h.ecc == 0 && h.xid == 0 }

// healthState tracks every GPU's health.
type healthState struct {
	holdDown time.Duration
	mu       sync.Mutex
	gpus     map[string]*gpuHealth
}

func newHealthState(gpus []*gpu, holdDown time.Duration) *healthState {
	s := &healthState{holdDown: holdDown, gpus: map[string]*gpuHealth{}}
	for _, g := range gpus {
		s.gpus[g.name] = &gpuHealth{}
	}
	return s
}

// taints returns the device taints of each unhealthy GPU.
func (s *healthState) taints() map[string][]resourceapi.DeviceTaint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]resourceapi.DeviceTaint{}
	for name, h := range s.gpus {
		var t []resourceapi.DeviceTaint
		if h.lost {
			t = append(t, resourceapi.DeviceTaint{Key: TaintGPULost, Effect: resourceapi.DeviceTaintEffectNoExecute})
		}
		if h.unreadable && !h.lost {
			t = append(t, resourceapi.DeviceTaint{Key: TaintUnreadable, Effect: resourceapi.DeviceTaintEffectNoSchedule})
		}
		if h.ecc > 0 {
			t = append(t, resourceapi.DeviceTaint{Key: TaintECC, Value: strconv.FormatUint(h.ecc, 10), Effect: resourceapi.DeviceTaintEffectNoSchedule})
		}
		if h.xid > 0 {
			t = append(t, resourceapi.DeviceTaint{Key: TaintXID, Value: strconv.FormatUint(h.xid, 10), Effect: resourceapi.DeviceTaintEffectNoSchedule})
		}
		if len(t) > 0 {
			sort.Slice(t, func(i, j int) bool { return t[i].Key < t[j].Key })
			out[name] = t
		}
	}
	return out
}

// update applies f to a GPU's health and reports whether it changed.
func (s *healthState) update(name string, f func(h *gpuHealth)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.gpus[name]
	if !ok {
		return false
	}
	before := *h
	f(h)
	return before != *h
}

// WatchHealth implements plugin.HealthWatcher. It listens for NVML XID
// and ECC events and probes every GPU each HealthInterval: a GPU that
// cannot be queried is lost, one with uncorrectable volatile ECC errors
// is tainted until a reset clears the count, and a critical XID taints the
// GPU for XIDHoldDown after its last occurrence. The probe also notices
// a MIG layout that someone else changed (a MIG manager applying a new
// config). changed is called after any change, so that the plugin
// republishes.
func (b *Backend) WatchHealth(ctx context.Context, changed func()) {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "health")
	set, ret := b.cfg.NVML.EventSetCreate()
	if ret != nvml.SUCCESS {
		logger.Error(nil, "NVML events unavailable, probing only", "error", nvml.ErrorString(ret))
		set = nil
	}
	if set != nil {
		defer set.Free()
		for _, g := range b.gpus {
			types := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
			if ret := g.handle.RegisterEvents(types, set); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
				logger.Error(nil, "Cannot register for GPU events", "gpu", g.name, "error", nvml.ErrorString(ret))
			}
		}
	}
	interval := b.cfg.HealthInterval
	nextProbe := time.Now()
	for ctx.Err() == nil {
		dirty := false
		if set != nil {
			ev, ret := set.Wait(uint32(min(interval, time.Second).Milliseconds()))
			if ret == nvml.SUCCESS {
				dirty = b.handleEvent(logger, ev)
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
		if time.Now().After(nextProbe) {
			dirty = b.probe(logger) || dirty
			b.checkMPS(klog.NewContext(ctx, logger))
			if b.layoutChanged() {
				logger.Info("MIG layout changed, republishing")
				dirty = true
			}
			nextProbe = time.Now().Add(interval)
		}
		if dirty {
			changed()
		}
	}
}

func (b *Backend) handleEvent(logger klog.Logger, ev nvml.EventData) bool {
	g := b.gpuOf(ev.Device)
	if g == nil {
		return false
	}
	switch ev.EventType {
	case nvml.EventTypeXidCriticalError:
		xid := ev.EventData
		if applicationXIDs[xid] {
			logger.V(2).Info("Application XID, GPU stays healthy", "gpu", g.name, "xid", xid)
			return false
		}
		logger.Info("Critical XID, tainting GPU", "gpu", g.name, "xid", xid)
		return b.health.update(g.name, func(h *gpuHealth) {
			h.xid, h.xidSeen = xid, time.Now()
			if xid == xidGPULost {
				h.lost = true
			}
		})
	case nvml.EventTypeDoubleBitEccError:
		logger.Info("Uncorrectable ECC error, tainting GPU", "gpu", g.name)
		return b.health.update(g.name, func(h *gpuHealth) { h.ecc = max(h.ecc, 1) })
	}
	return false
}

// probe queries every GPU and expires XIDs.
func (b *Backend) probe(logger klog.Logger) bool {
	changed := false
	for _, g := range b.gpus {
		_, memRet := g.handle.GetMemoryInfo()
		ecc, eccRet := g.handle.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		c := b.health.update(g.name, func(h *gpuHealth) {
			h.lost = memRet == nvml.ERROR_GPU_IS_LOST || eccRet == nvml.ERROR_GPU_IS_LOST
			if eccRet == nvml.SUCCESS {
				h.ecc = ecc
			}
			if h.xid != 0 && !h.lost && time.Since(h.xidSeen) > b.health.holdDown {
				h.xid = 0
			}
		})
		if c {
			logger.Info("GPU health changed", "gpu", g.name, "healthy", b.health.isHealthy(g.name))
		}
		changed = changed || c
	}
	return changed
}

func (s *healthState) isHealthy(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gpus[name].healthy()
}

func (b *Backend) gpuOf(dev nvml.Device) *gpu {
	for _, g := range b.gpus {
		if g.handle == dev {
			return g
		}
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil
	}
	for _, g := range b.gpus {
		if g.uuid == uuid {
			return g
		}
	}
	return nil
}
