package nvidia

import (
	"context"
	"encoding/json"
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

// MPSControl starts and stops the CUDA MPS control daemon of a GPU
// (nvidia-cuda-mps-control). One daemon serves every MPS claim of a GPU.
type MPSControl interface {
	Start(ctx context.Context, gpuUUID, pipeDir, logDir string) error
	Stop(ctx context.Context, gpuUUID, pipeDir string) error
	// Running lists the GPU UUIDs with a running daemon.
	Running() []string
}

// sharedDevice is a shared GPU of a claim with the limits to enforce.
type sharedDevice struct {
	index    int // position in NVIDIA_VISIBLE_DEVICES
	gpu      *gpu
	strategy sharingStrategy
	cores    int64 // percent of the GPU
	memory   int64 // bytes
}

// decodeConfigs decodes a device's opaque configs strictly and merges
// them, later ones (claim) over earlier ones (class).
func decodeConfigs(raws []json.RawMessage) (*configv1alpha1.GpuConfig, error) {
	merged := &configv1alpha1.GpuConfig{}
	for _, raw := range raws {
		cfg, err := configv1alpha1.DecodeGpuConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("opaque config for %s: %w", DriverName, err)
		}
		if cfg.Sharing != nil {
			merged.Sharing = cfg.Sharing
		}
	}
	return merged, nil
}

// sharedLimits works out a shared device's strategy and limits from what
// the claim consumed and the config, and rejects a config that asks for
// more than that.
func (b *Backend) sharedLimits(d *device, a plugin.AllocatedDevice, cfg *configv1alpha1.GpuConfig) (sharedDevice, error) {
	s := sharedDevice{gpu: d.gpu, strategy: defaultStrategy, cores: sharedCores, memory: int64(d.gpu.memoryBytes)}
	if q, ok := a.ConsumedCapacity["cores"]; ok {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return s, fmt.Errorf("consumed cores %q: %w", q, err)
		}
		s.cores = v.Value()
	}
	if q, ok := a.ConsumedCapacity["memory"]; ok {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return s, fmt.Errorf("consumed memory %q: %w", q, err)
		}
		s.memory = v.Value()
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

// startSharing records a claim as a user of the GPU's sharing mechanism,
// starting the GPU's MPS daemon for its first MPS claim. MPS puts the GPU
// in exclusive-process mode, so it cannot serve MPS and non-MPS claims at
// once.
func (b *Backend) startSharing(ctx context.Context, g *gpu, s sharingStrategy) error {
	if s == strategyMPS {
		if n := b.nonMPSUsers[g.name]; n > 0 {
			return fmt.Errorf("GPU %s is shared by %d claims without MPS; a GPU serves either MPS or non-MPS claims", g.name, n)
		}
		if b.mpsUsers[g.name] == 0 {
			if ret := g.handle.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
				return nvmlError("set exclusive-process compute mode on "+g.name, ret)
			}
			if err := b.cfg.MPS.Start(ctx, g.uuid, b.mpsDir(g, "pipe"), b.mpsDir(g, "log")); err != nil {
				g.handle.SetComputeMode(nvml.COMPUTEMODE_DEFAULT)
				return fmt.Errorf("start MPS daemon on %s: %w", g.name, err)
			}
			klog.FromContext(ctx).V(1).Info("Started MPS daemon", "gpu", g.name)
		}
		b.mpsUsers[g.name]++
		return nil
	}
	if n := b.mpsUsers[g.name]; n > 0 {
		return fmt.Errorf("GPU %s serves %d MPS claims; a GPU serves either MPS or non-MPS claims", g.name, n)
	}
	b.sharedUsers(g, +1)
	return nil
}

// stopSharing undoes startSharing.
func (b *Backend) stopSharing(ctx context.Context, g *gpu, s sharingStrategy) error {
	if s != strategyMPS {
		b.sharedUsers(g, -1)
		return nil
	}
	if b.mpsUsers[g.name] > 0 {
		b.mpsUsers[g.name]--
	}
	if b.mpsUsers[g.name] > 0 {
		return nil
	}
	return b.stopMPS(ctx, g)
}

func (b *Backend) stopMPS(ctx context.Context, g *gpu) error {
	if err := b.cfg.MPS.Stop(ctx, g.uuid, b.mpsDir(g, "pipe")); err != nil {
		return fmt.Errorf("stop MPS daemon on %s: %w", g.name, err)
	}
	if ret := g.handle.SetComputeMode(nvml.COMPUTEMODE_DEFAULT); ret != nvml.SUCCESS {
		return nvmlError("reset compute mode of "+g.name, ret)
	}
	klog.FromContext(ctx).V(1).Info("Stopped MPS daemon", "gpu", g.name)
	return nil
}

// stopUnusedMPS stops daemons that no prepared claim uses, after a crash.
func (b *Backend) stopUnusedMPS(ctx context.Context) error {
	if b.cfg.MPS == nil {
		return nil
	}
	var errs []error
	for _, uuid := range b.cfg.MPS.Running() {
		for _, g := range b.gpus {
			if g.uuid == uuid && b.mpsUsers[g.name] == 0 {
				errs = append(errs, b.stopMPS(ctx, g))
			}
		}
	}
	return errors.Join(errs...)
}

func (b *Backend) mpsDir(g *gpu, kind string) string {
	return filepath.Join(b.cfg.StateDir, "mps", g.uuid, kind)
}

// sharingEdits are the claim-wide edits that enforce the limits of its
// shared devices.
func (b *Backend) sharingEdits(claim plugin.ClaimRef, shared []sharedDevice) (cdispec.ContainerEdits, error) {
	var edits cdispec.ContainerEdits
	strategy := shared[0].strategy
	for _, s := range shared[1:] {
		if s.strategy != strategy {
			return edits, fmt.Errorf("sharing: the shared GPUs of one claim must use one strategy, got %s and %s", strategy, s.strategy)
		}
	}
	switch strategy {
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
			"CUDA_DEVICE_SM_LIMIT="+strconv.FormatInt(shared[0].cores, 10),
			"CUDA_DEVICE_MEMORY_SHARED_CACHE="+hamiCacheDir+"/vgpu.cache")
		for _, s := range shared {
			edits.Env = append(edits.Env,
				fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d=%dm", s.index, s.memory>>20),
				fmt.Sprintf("CUDA_DEVICE_SM_LIMIT_%d=%d", s.index, s.cores))
		}
		edits.Mounts = append(edits.Mounts,
			&cdispec.Mount{HostPath: b.cfg.HAMiCoreLibrary, ContainerPath: hamiLibraryPath, Options: []string{"ro", "nosuid", "nodev", "bind"}},
			&cdispec.Mount{HostPath: preload, ContainerPath: ldPreloadPath, Options: []string{"ro", "nosuid", "nodev", "bind"}},
			&cdispec.Mount{HostPath: cache, ContainerPath: hamiCacheDir, Options: []string{"rw", "nosuid", "nodev", "bind"}})
	case strategyMPS:
		if len(shared) > 1 {
			return edits, errors.New("sharing: an MPS claim may hold one shared GPU")
		}
		s := shared[0]
		edits.Env = append(edits.Env,
			"CUDA_MPS_PIPE_DIRECTORY="+mpsPipeDir,
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.FormatInt(s.cores, 10),
			fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%d=%dM", s.index, s.memory>>20))
		edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: b.mpsDir(s.gpu, "pipe"), ContainerPath: mpsPipeDir, Options: []string{"rw", "nosuid", "nodev", "bind"}})
	case strategyTimeSlicing, strategyNone:
	}
	return edits, nil
}

func (b *Backend) sharedUsers(g *gpu, delta int) {
	b.nonMPSUsers[g.name] = max(0, b.nonMPSUsers[g.name]+delta)
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
