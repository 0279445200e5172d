package nvidia

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
	"github.com/strata-sh/strata/drivers/plugin"
)

type sharingStrategy = configv1alpha1.SharingStrategy

const (
	strategyHAMiCore    = configv1alpha1.SharingHAMiCore
	strategyMPS         = configv1alpha1.SharingMPS
	strategyTimeSlicing = configv1alpha1.SharingTimeSlicing
	strategyNone        = configv1alpha1.SharingNone
)

// defaultStrategy isolates shared GPUs when neither the DeviceClass nor
// the claim says how: HAMi-core enforces the allocated cores and memory
// the way Koordinator and HAMi users expect.
const defaultStrategy = strategyHAMiCore

// Paths inside the container.
const (
	hamiLibraryPath   = "/usr/local/vgpu/libvgpu.so"
	hamiCacheDir      = "/var/run/strata/hami"
	mpsPipeDir        = "/var/run/nvidia-mps"
	ldPreloadPath     = "/etc/ld.so.preload"
	claimFilesDirName = "claims"
)

// sharedDevice is a shared GPU of a claim with the limits to enforce.
type sharedDevice struct {
	gpu      *gpu
	strategy sharingStrategy
	// reserved says the claim reserved compute (asked for cores); cores
	// is the compute limit in percent of the GPU either way.
	reserved  bool
	cores     int64
	memory    int64 // bytes
	timeSlice configv1alpha1.TimeSliceInterval
}

// configHandler decodes GpuConfigs for the plugin core.
type configHandler struct{}

// ConfigHandler implements plugin.Configurable.
func (b *Backend) ConfigHandler() plugin.ConfigHandler { return configHandler{} }

// Decode implements plugin.ConfigHandler.
func (configHandler) Decode(raw []byte) (any, error) {
	return configv1alpha1.DecodeGpuConfig(raw)
}

// Effective implements plugin.ConfigHandler: later configs (the claim's)
// over earlier ones (the class's). A claim's sharing config replaces the
// class's, except that the class's compute share stays the default.
func (configHandler) Effective(configs []any) (any, error) {
	merged := &configv1alpha1.GpuConfig{}
	for _, c := range configs {
		cfg := c.(*configv1alpha1.GpuConfig)
		if cfg.Sharing != nil {
			share := cfg.Sharing.ComputeShare
			if share == "" && merged.Sharing != nil {
				share = merged.Sharing.ComputeShare
			}
			merged.Sharing = cfg.Sharing.DeepCopy()
			merged.Sharing.ComputeShare = share
		}
	}
	return merged, nil
}

// gpuConfig is a device's effective config (the defaults when the core
// handed none).
func gpuConfig(a plugin.AllocatedDevice) *configv1alpha1.GpuConfig {
	if cfg, ok := a.Config.(*configv1alpha1.GpuConfig); ok && cfg != nil {
		return cfg
	}
	return &configv1alpha1.GpuConfig{}
}

// sharedLimits works out a shared device's strategy and limits from what
// the claim consumed and the config, and rejects a config that asks for
// more than that. A claim that reserved no cores gets a compute limit by
// the config's compute share: its fraction of the GPU's memory
// (Proportional, the default) or none (Unlimited).
func (b *Backend) sharedLimits(d *device, a plugin.AllocatedDevice, cfg *configv1alpha1.GpuConfig) (sharedDevice, error) {
	s := sharedDevice{gpu: d.gpu, strategy: defaultStrategy, memory: int64(d.gpu.memoryBytes)}
	if q, ok := a.ConsumedCapacity["memory"]; ok {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return s, fmt.Errorf("consumed memory %q: %w", q, err)
		}
		s.memory = v.Value()
	}
	if q, ok := a.ConsumedCapacity["cores"]; ok {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return s, fmt.Errorf("consumed cores %q: %w", q, err)
		}
		s.cores, s.reserved = v.Value(), v.Value() > 0
	}
	share := configv1alpha1.ComputeShareProportional
	if cfg.Sharing != nil && cfg.Sharing.ComputeShare != "" {
		share = cfg.Sharing.ComputeShare
	}
	if !s.reserved {
		s.cores = sharedCores
		if share == configv1alpha1.ComputeShareProportional && d.gpu.memoryBytes > 0 {
			s.cores = min(sharedCores, max(1, (s.memory*sharedCores+int64(d.gpu.memoryBytes)-1)/int64(d.gpu.memoryBytes)))
		}
	}
	if cfg.Sharing == nil {
		return s, nil
	}
	s.strategy = cfg.Sharing.Strategy
	p := field.NewPath("sharing")
	var errs field.ErrorList
	switch s.strategy {
	case strategyHAMiCore:
		if h := cfg.Sharing.HAMiCore; h != nil {
			errs = append(errs, b.lowerCores(&s, p.Child("hamiCore", "coreLimit"), h.CoreLimit, d.name)...)
			errs = append(errs, b.lowerMemory(&s, p.Child("hamiCore", "memoryLimit"), h.MemoryLimit, d)...)
		}
	case strategyMPS:
		if b.cfg.MPS == nil {
			errs = append(errs, field.Invalid(p.Child("strategy"), s.strategy, "MPS is not available on this node"))
		}
		if m := cfg.Sharing.MPS; m != nil {
			errs = append(errs, b.lowerCores(&s, p.Child("mps", "activeThreadPercentage"), m.ActiveThreadPercentage, d.name)...)
			errs = append(errs, b.lowerMemory(&s, p.Child("mps", "pinnedMemoryLimit"), m.PinnedMemoryLimit, d)...)
		}
	case strategyTimeSlicing:
		s.timeSlice = configv1alpha1.TimeSliceDefault
		if ts := cfg.Sharing.TimeSlicing; ts != nil && ts.Interval != "" {
			s.timeSlice = ts.Interval
		}
		if s.timeSlice != configv1alpha1.TimeSliceDefault && b.cfg.TimeSlice == nil {
			errs = append(errs, field.Invalid(p.Child("timeSlicing", "interval"), s.timeSlice, "this node cannot set GPU time slices (no nvidia-smi configured); use Default"))
		}
	}
	if len(errs) > 0 {
		return s, errs.ToAggregate()
	}
	return s, nil
}

func (b *Backend) lowerCores(s *sharedDevice, p *field.Path, limit *int32, dev string) field.ErrorList {
	if limit == nil {
		return nil
	}
	if int64(*limit) > s.cores {
		return field.ErrorList{field.Invalid(p, *limit, fmt.Sprintf("exceeds the %d cores the claim was allocated on %s", s.cores, dev))}
	}
	s.cores = int64(*limit)
	return nil
}

func (b *Backend) lowerMemory(s *sharedDevice, p *field.Path, limit *resource.Quantity, d *device) field.ErrorList {
	if limit == nil {
		return nil
	}
	total := bytes(d.gpu.memoryBytes)
	if limit.Cmp(total) > 0 {
		return field.ErrorList{field.Invalid(p, limit.String(), fmt.Sprintf("exceeds the memory of device %s (%s)", d.name, total.String()))}
	}
	if limit.Value() > s.memory {
		return field.ErrorList{field.Invalid(p, limit.String(), fmt.Sprintf("exceeds the %s of memory the claim was allocated on %s",
			resource.NewQuantity(s.memory, resource.BinarySI).String(), d.name))}
	}
	s.memory = limit.Value()
	return nil
}

// startSharing records a claim as a user of the GPU's sharing mechanism:
// the GPU's MPS daemon starts with its first MPS claim, and the first
// TimeSlicing claim sets the GPU's time slice. MPS puts the GPU in
// exclusive-process mode, so it cannot serve MPS and non-MPS claims at
// once; the time slice is per GPU, so its claims must agree on it.
func (b *Backend) startSharing(ctx context.Context, g *gpu, s sharedDevice) error {
	if s.strategy == strategyMPS {
		if n := b.nonMPSUsers[g.name]; n > 0 {
			return fmt.Errorf("GPU %s is shared by %d claims without MPS; a GPU serves either MPS or non-MPS claims", g.name, n)
		}
		if b.mpsUsers[g.name] == 0 {
			if ret := g.handle.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
				return nvmlError("set exclusive-process compute mode on "+g.name, ret)
			}
		}
		// Every MPS claim finds its GPU's daemon answering: the first
		// starts it, a later one restarts it if it died.
		if err := b.cfg.MPS.Ensure(ctx, g.uuid, b.mpsDaemon(g).Dir); err != nil {
			if b.mpsUsers[g.name] == 0 {
				g.handle.SetComputeMode(nvml.COMPUTEMODE_DEFAULT)
			}
			return fmt.Errorf("start MPS daemon on %s: %w", g.name, err)
		}
		if b.mpsUsers[g.name] == 0 {
			klog.FromContext(ctx).V(1).Info("Started MPS daemon", "gpu", g.name)
		}
		b.mpsUsers[g.name]++
		return nil
	}
	if n := b.mpsUsers[g.name]; n > 0 {
		return fmt.Errorf("GPU %s serves %d MPS claims; a GPU serves either MPS or non-MPS claims", g.name, n)
	}
	if s.strategy == strategyTimeSlicing {
		use := b.timeSliced[g.name]
		if use.claims > 0 && use.interval != s.timeSlice {
			return fmt.Errorf("sharing.timeSlicing.interval: GPU %s is time-sliced with interval %s by %d claims; a GPU has one time slice", g.name, use.interval, use.claims)
		}
		if use.claims == 0 && s.timeSlice != configv1alpha1.TimeSliceDefault {
			if err := b.cfg.TimeSlice.SetTimeSlice(ctx, g.uuid, timeSliceNumber(s.timeSlice)); err != nil {
				return fmt.Errorf("set time slice of %s to %s: %w", g.name, s.timeSlice, err)
			}
			klog.FromContext(ctx).V(1).Info("Set GPU time slice", "gpu", g.name, "interval", s.timeSlice)
		}
	}
	b.countSharing(g, deviceState{Strategy: string(s.strategy), TimeSlice: string(s.timeSlice)}, +1)
	return nil
}

// countSharing adds delta users of a prepared shared device's mechanism.
func (b *Backend) countSharing(g *gpu, st deviceState, delta int) {
	switch sharingStrategy(st.Strategy) {
	case strategyMPS:
		b.mpsUsers[g.name] = max(0, b.mpsUsers[g.name]+delta)
		return
	case strategyTimeSlicing:
		use := b.timeSliced[g.name]
		use.claims = max(0, use.claims+delta)
		use.interval = configv1alpha1.TimeSliceInterval(st.TimeSlice)
		if use.claims == 0 {
			delete(b.timeSliced, g.name)
		} else {
			b.timeSliced[g.name] = use
		}
	}
	b.nonMPSUsers[g.name] = max(0, b.nonMPSUsers[g.name]+delta)
}

// stopSharing undoes startSharing: the last MPS claim stops the daemon,
// the last TimeSlicing claim puts the time slice back to Default.
func (b *Backend) stopSharing(ctx context.Context, g *gpu, st deviceState) error {
	b.countSharing(g, st, -1)
	switch sharingStrategy(st.Strategy) {
	case strategyMPS:
		if b.mpsUsers[g.name] == 0 {
			return b.stopMPS(ctx, g)
		}
	case strategyTimeSlicing:
		iv := configv1alpha1.TimeSliceInterval(st.TimeSlice)
		if b.timeSliced[g.name].claims == 0 && iv != "" && iv != configv1alpha1.TimeSliceDefault && b.cfg.TimeSlice != nil {
			if err := b.cfg.TimeSlice.SetTimeSlice(ctx, g.uuid, timeSliceNumber(configv1alpha1.TimeSliceDefault)); err != nil {
				return fmt.Errorf("reset time slice of %s: %w", g.name, err)
			}
		}
	}
	return nil
}

func (b *Backend) stopMPS(ctx context.Context, g *gpu) error {
	if err := b.cfg.MPS.Stop(ctx, g.uuid, b.mpsDaemon(g).Dir); err != nil {
		return fmt.Errorf("stop MPS daemon on %s: %w", g.name, err)
	}
	if ret := g.handle.SetComputeMode(nvml.COMPUTEMODE_DEFAULT); ret != nvml.SUCCESS {
		return nvmlError("reset compute mode of "+g.name, ret)
	}
	klog.FromContext(ctx).V(1).Info("Stopped MPS daemon", "gpu", g.name)
	return nil
}

// reconcileMPSLocked makes the daemons match the prepared claims, after a
// restart or another instance's changes: a daemon no claim uses is
// stopped (one that does not answer, as after a reboot, is only cleaned
// up), and the daemon of a GPU with MPS claims is started again if it does
// not answer. Failures are logged, not returned: start-up goes on, and
// the health probe tries again.
func (b *Backend) reconcileMPSLocked(ctx context.Context) {
	if b.cfg.MPS == nil {
		return
	}
	logger := klog.FromContext(ctx)
	daemons, err := b.cfg.MPS.List(ctx)
	if err != nil {
		logger.Error(err, "Cannot list MPS daemons")
	}
	for uuid, answers := range daemons {
		g := b.gpuByUUID(uuid)
		if g != nil && b.mpsUsers[g.name] > 0 {
			continue
		}
		if g == nil {
			// Not a GPU of this node (any more): only its files go.
			if err := b.cfg.MPS.Stop(ctx, uuid, MPSDir(b.cfg.StateDir, uuid)); err != nil {
				logger.Error(err, "Cannot remove the MPS daemon of a GPU that is gone", "gpu", uuid)
			}
			continue
		}
		logger.Info("Stopping MPS daemon no prepared claim uses", "gpu", g.name, "answers", answers)
		if err := b.stopMPS(ctx, g); err != nil {
			logger.Error(err, "Cannot stop unused MPS daemon", "gpu", g.name)
		}
	}
	b.ensureMPSLocked(ctx)
}

// ensureMPSLocked starts again the daemon of every GPU with MPS claims
// that does not answer.
func (b *Backend) ensureMPSLocked(ctx context.Context) {
	if b.cfg.MPS == nil {
		return
	}
	for _, g := range b.gpus {
		if b.mpsUsers[g.name] == 0 {
			continue
		}
		if err := b.cfg.MPS.Ensure(ctx, g.uuid, b.mpsDaemon(g).Dir); err != nil {
			klog.FromContext(ctx).Error(err, "MPS daemon of a GPU with MPS claims does not answer", "gpu", g.name, "claims", b.mpsUsers[g.name])
		}
	}
}

// checkMPS is the health probe's look at the MPS daemons: the daemon of
// a healthy GPU with MPS claims that does not answer is started again.
// The lock is held only to start one, as a prepare would.
func (b *Backend) checkMPS(ctx context.Context) {
	if b.cfg.MPS == nil {
		return
	}
	b.mu.Lock()
	var used []*gpu
	for _, g := range b.gpus {
		if b.mpsUsers[g.name] > 0 && b.health.isHealthy(g.name) {
			used = append(used, g)
		}
	}
	b.mu.Unlock()
	if len(used) == 0 {
		return
	}
	daemons, err := b.cfg.MPS.List(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot list MPS daemons")
		return
	}
	for _, g := range used {
		if daemons[g.uuid] {
			continue
		}
		b.mu.Lock()
		if b.mpsUsers[g.name] > 0 {
			klog.FromContext(ctx).Info("MPS daemon of a GPU with MPS claims does not answer, starting it again", "gpu", g.name, "claims", b.mpsUsers[g.name])
			if err := b.cfg.MPS.Ensure(ctx, g.uuid, b.mpsDaemon(g).Dir); err != nil {
				klog.FromContext(ctx).Error(err, "Cannot start the MPS daemon again", "gpu", g.name)
			}
		}
		b.mu.Unlock()
	}
}

func (b *Backend) gpuByUUID(uuid string) *gpu {
	for _, g := range b.gpus {
		if g.uuid == uuid {
			return g
		}
	}
	return nil
}

func (b *Backend) mpsDaemon(g *gpu) MPSDaemon {
	return MPSDaemon{GPU: g.uuid, Dir: MPSDir(b.cfg.StateDir, g.uuid)}
}

// sharingEdits are one shared device's edits that enforce its limits.
// They go with the device, not the claim, so a container that uses
// another request of the same claim is not limited by them.
func (b *Backend) sharingEdits(claim plugin.ClaimRef, s sharedDevice) (cdispec.ContainerEdits, error) {
	var edits cdispec.ContainerEdits
	switch s.strategy {
	case strategyHAMiCore:
		dir, err := b.claimDir(claim, true)
		if err != nil {
			return edits, err
		}
		cache := filepath.Join(dir, "hami")
		preload := filepath.Join(dir, "ld.so.preload")
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return edits, err
		}
		if err := os.WriteFile(preload, []byte(hamiLibraryPath+"\n"), 0o644); err != nil {
			return edits, err
		}
		edits.Env = append(edits.Env,
			fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT=%dm", s.memory>>20),
			"CUDA_DEVICE_SM_LIMIT="+strconv.FormatInt(s.cores, 10),
			"CUDA_DEVICE_MEMORY_SHARED_CACHE="+hamiCacheDir+"/vgpu.cache")
		edits.Mounts = append(edits.Mounts,
			&cdispec.Mount{HostPath: b.cfg.HAMiCoreLibrary, ContainerPath: hamiLibraryPath, Options: []string{"ro", "nosuid", "nodev", "bind"}},
			&cdispec.Mount{HostPath: preload, ContainerPath: ldPreloadPath, Options: []string{"ro", "nosuid", "nodev", "bind"}},
			&cdispec.Mount{HostPath: cache, ContainerPath: hamiCacheDir, Options: []string{"rw", "nosuid", "nodev", "bind"}})
	case strategyMPS:
		edits.Env = append(edits.Env,
			"CUDA_MPS_PIPE_DIRECTORY="+mpsPipeDir,
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.FormatInt(s.cores, 10),
			fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dM", s.memory>>20))
		edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: b.mpsDaemon(s.gpu).PipeDir(), ContainerPath: mpsPipeDir, Options: []string{"rw", "nosuid", "nodev", "bind"}})
	case strategyTimeSlicing, strategyNone:
	}
	return edits, nil
}

// claimDir is the host directory for a claim's runtime files.
func (b *Backend) claimDir(claim plugin.ClaimRef, create bool) (string, error) {
	if b.cfg.StateDir == "" {
		return "", errors.New("no state directory configured for per-claim files")
	}
	dir := filepath.Join(b.cfg.StateDir, claimFilesDirName, string(claim.UID))
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func (b *Backend) removeClaimFiles(claim plugin.ClaimRef) error {
	if b.cfg.StateDir == "" || claim.UID == "" {
		return nil
	}
	dir, _ := b.claimDir(claim, false)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove files of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

// removeUnownedClaimFiles removes per-claim directories of claims that
// are not prepared.
func (b *Backend) removeUnownedClaimFiles(ctx context.Context, owned map[string]bool) error {
	if b.cfg.StateDir == "" {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(b.cfg.StateDir, claimFilesDirName))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if owned[e.Name()] {
			continue
		}
		klog.FromContext(ctx).Info("Removing files of a claim that is not prepared", "claimUID", e.Name())
		if err := os.RemoveAll(filepath.Join(b.cfg.StateDir, claimFilesDirName, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
