// Package nvidia is the NVIDIA GPU backend of Strata's kubelet plugin
// (driver nvidia.strata.sh). It discovers GPUs through NVML and sysfs and
// publishes each GPU three ways: as a whole device, as a shared device
// with consumable capacity, and as one device per MIG placement, all
// drawing on the GPU's shared counters so that they exclude each other. It
// prepares them for containers through CDI: MIG instances are created and
// destroyed with NVML, shared GPUs get HAMi-core, MPS or time-slicing
// limits.
package nvidia

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
)

// DriverName is the DRA driver name of this backend.
const DriverName = "nvidia.strata.sh"

// AcceleratorDomain is the vendor-neutral attribute domain that every
// Strata accelerator driver publishes.
const AcceleratorDomain = "accelerator.strata.sh"

// Defaults of Config.
const (
	DefaultHAMiCoreLibrary = "/usr/local/vgpu/libvgpu.so"
	DefaultHealthInterval  = 5 * time.Second
	DefaultXIDHoldDown     = 10 * time.Minute
)

// Config wires the backend to the hardware.
type Config struct {
	// NVML is the NVML library (or a mock of it).
	NVML nvml.Interface
	// SysfsRoot is where sysfs is mounted ("" means /sys).
	SysfsRoot string
	// ProcRoot is where procfs is mounted ("" means /proc); device majors
	// and MIG capability minors are read from it.
	ProcRoot string
	// DevRoot is prefixed to device node paths on the host ("" means /).
	DevRoot string
	// StateDir holds per-claim runtime files (HAMi-core caches, MPS
	// pipes); normally the plugin data directory.
	StateDir string
	// FabricPartitionsFile is the NVSwitch fabric manager's partition list
	// ("fmpm -l" output); empty or missing means no NVLink partitions.
	FabricPartitionsFile string
	// HAMiCoreLibrary is the host path of HAMi-core's libvgpu.so.
	HAMiCoreLibrary string
	// MPS starts and stops MPS control daemons; nil disables MPS sharing.
	MPS MPSControl
	// DynamicMIG publishes every MIG placement of MIG-capable GPUs and
	// creates instances on demand. It adds counter slices, which cost the
	// scheduler in proportion to the number of such nodes (docs/nvidia.md).
	DynamicMIG bool
	// HealthInterval is how often GPUs are probed; XIDHoldDown is how long
	// a critical XID keeps a GPU tainted after the last occurrence.
	HealthInterval time.Duration
	XIDHoldDown    time.Duration
}

// Backend implements plugin.Backend for NVIDIA GPUs.
type Backend struct {
	cfg    Config
	gpus   []*gpu
	byName map[string]*gpu
	devs   devNumbers
	health *healthState

	// mu guards devices, mpsUsers and the hardware changes of prepare and
	// unprepare.
	mu          sync.Mutex
	devices     map[string]*device
	mpsUsers    map[string]int // GPU name -> claims using its MPS daemon
	nonMPSUsers map[string]int // GPU name -> other claims sharing it
}

var (
	_ plugin.Backend       = (*Backend)(nil)
	_ plugin.Reconciler    = (*Backend)(nil)
	_ plugin.HealthWatcher = (*Backend)(nil)
)

// New initialises NVML and discovers the GPUs.
func New(cfg Config) (*Backend, error) {
	if cfg.NVML == nil {
		return nil, errors.New("NVML library is required")
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/"
	}
	if cfg.HAMiCoreLibrary == "" {
		cfg.HAMiCoreLibrary = DefaultHAMiCoreLibrary
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.XIDHoldDown == 0 {
		cfg.XIDHoldDown = DefaultXIDHoldDown
	}
	if ret := cfg.NVML.Init(); ret != nvml.SUCCESS {
		return nil, nvmlError("init", ret)
	}
	devs, err := readDevNumbers(cfg.ProcRoot)
	if err != nil {
		return nil, err
	}
	gpus, err := discoverGPUs(cfg.NVML, pci.NewReader(cfg.SysfsRoot))
	if err != nil {
		return nil, err
	}
	indexByBus := map[string]int{}
	for _, g := range gpus {
		indexByBus[g.topology.BusID] = g.index
	}
	parts, err := readPartitions(cfg.FabricPartitionsFile, indexByBus)
	if err != nil {
		return nil, err
	}
	b := &Backend{cfg: cfg, gpus: gpus, byName: map[string]*gpu{}, devs: devs, mpsUsers: map[string]int{}, nonMPSUsers: map[string]int{}}
	for _, g := range gpus {
		g.partitions = parts[g.topology.BusID]
		b.byName[g.name] = g
	}
	b.health = newHealthState(gpus, cfg.XIDHoldDown)
	return b, nil
}

// Close releases NVML.
func (b *Backend) Close() { b.cfg.NVML.Shutdown() }

// Discover implements plugin.Backend. GPUs are enumerated once at start;
// what changes afterwards is their health, which becomes device taints.
func (b *Backend) Discover(_ context.Context) (*plugin.Inventory, error) {
	set, err := buildDevices(b.gpus, b.health.taints(), b.cfg.DynamicMIG)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.devices = set.byName
	b.mu.Unlock()
	return &plugin.Inventory{Devices: set.devices, SharedCounters: set.counters}, nil
}

// deviceState is what the checkpoint keeps about a prepared device.
type deviceState struct {
	Kind deviceKind `json:"kind"`
	// GPUInstance and ComputeInstance are the ids of a MIG device's
	// instances.
	GPUInstance     *uint32 `json:"gpuInstance,omitempty"`
	ComputeInstance *uint32 `json:"computeInstance,omitempty"`
	// Strategy is a shared device's isolation.
	Strategy string `json:"strategy,omitempty"`
}

// Prepare implements plugin.Backend. Devices are prepared in order; if
// one fails, the ones before it are released again.
func (b *Backend) Prepare(ctx context.Context, req *plugin.PrepareRequest) (*plugin.PrepareResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &plugin.PrepareResponse{Common: b.controlEdits()}
	claim := claimRef(req.Claim)
	var visible []string
	var shared []sharedDevice
	for i, a := range req.Devices {
		prepared, uuid, sd, err := b.prepareDevice(ctx, claim, a)
		if err != nil {
			b.releaseLocked(ctx, claim, resp.Devices)
			return nil, fmt.Errorf("device %s: %w", a.Device, err)
		}
		resp.Devices = append(resp.Devices, prepared)
		visible = append(visible, uuid)
		if sd != nil {
			sd.index = i
			shared = append(shared, *sd)
		}
	}
	resp.Common.Env = append(resp.Common.Env, "NVIDIA_VISIBLE_DEVICES="+strings.Join(visible, ","))
	if len(shared) > 0 {
		edits, err := b.sharingEdits(claim, shared)
		if err != nil {
			b.releaseLocked(ctx, claim, resp.Devices)
			return nil, err
		}
		resp.Common = mergeEdits(resp.Common, edits)
	}
	return resp, nil
}

// Validate implements plugin.Validator: unknown devices and bad opaque
// configurations are refused before the plugin records anything.
func (b *Backend) Validate(_ context.Context, req *plugin.PrepareRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range req.Devices {
		if err := b.validateDevice(a); err != nil {
			return fmt.Errorf("device %s: %w", a.Device, err)
		}
	}
	return nil
}

func (b *Backend) validateDevice(a plugin.AllocatedDevice) error {
	d, ok := b.devices[a.Device]
	if !ok {
		return errNotOnNode
	}
	cfg, err := decodeConfigs(a.Configs)
	if err != nil {
		return err
	}
	switch d.kind {
	case kindGPU:
		_, err = b.sharedLimits(d, a, cfg)
	case kindMIG:
		if cfg.Sharing != nil {
			err = errSharingOnMIG
		}
	}
	return err
}

var (
	errNotOnNode    = errors.New("not a device of this node")
	errSharingOnMIG = errors.New("sharing: only GPUs take a sharing configuration; this is a MIG device")
)

func (b *Backend) prepareDevice(ctx context.Context, claim plugin.ClaimRef, a plugin.AllocatedDevice) (plugin.PreparedDevice, string, *sharedDevice, error) {
	d, ok := b.devices[a.Device]
	if !ok {
		return plugin.PreparedDevice{}, "", nil, errNotOnNode
	}
	cfg, err := decodeConfigs(a.Configs)
	if err != nil {
		return plugin.PreparedDevice{}, "", nil, err
	}
	out := plugin.PreparedDevice{Request: a.Request, Pool: a.Pool, Device: a.Device, ShareID: a.ShareID}
	st := deviceState{Kind: d.kind}
	gpuNode := b.node(fmt.Sprintf("nvidia%d", d.gpu.minor), b.devs.nvidia, int64(d.gpu.minor))
	uuid := d.gpu.uuid
	var sd *sharedDevice
	switch d.kind {
	case kindGPU:
		if err := b.setMIGMode(d.gpu, false); err != nil {
			return out, "", nil, err
		}
		s, err := b.sharedLimits(d, a, cfg)
		if err != nil {
			return out, "", nil, err
		}
		out.Edits.DeviceNodes = []*cdispec.DeviceNode{gpuNode}
		// All of the GPU and no sharing config: the claim has the GPU to
		// itself and needs no limits.
		if cfg.Sharing == nil && s.cores == sharedCores && s.memory == int64(d.gpu.memoryBytes) {
			break
		}
		if err := b.startSharing(ctx, d.gpu, s.strategy); err != nil {
			return out, "", nil, err
		}
		st.Strategy = string(s.strategy)
		sd = &s
	case kindMIG:
		if cfg.Sharing != nil {
			return out, "", nil, errSharingOnMIG
		}
		gi, ci, err := b.createMIG(ctx, d)
		if err != nil {
			return out, "", nil, err
		}
		st.GPUInstance, st.ComputeInstance = &gi, &ci
		nodes, err := b.migNodes(d.gpu, gi, ci)
		if err != nil {
			_ = b.destroyMIG(ctx, d, &gi)
			return out, "", nil, err
		}
		out.Edits.DeviceNodes = append([]*cdispec.DeviceNode{gpuNode}, nodes...)
		uuid = fmt.Sprintf("MIG-%s/%d/%d", d.gpu.uuid, gi, ci)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return out, "", nil, err
	}
	out.State = raw
	return out, uuid, sd, nil
}

// Unprepare implements plugin.Backend.
func (b *Backend) Unprepare(ctx context.Context, claim plugin.ClaimRef, devices []plugin.PreparedDevice) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.releaseLocked(ctx, claim, devices)
}

// releaseLocked undoes what prepare did for each device and for the
// claim. Devices without State (an interrupted prepare) are found by
// identity: a MIG device's instance by its profile and placement.
func (b *Backend) releaseLocked(ctx context.Context, claim plugin.ClaimRef, devices []plugin.PreparedDevice) error {
	var errs []error
	for _, p := range devices {
		d, ok := b.devices[p.Device]
		if !ok {
			klog.FromContext(ctx).Info("Prepared device no longer published, nothing to release", "device", p.Device)
			continue
		}
		var st deviceState
		if len(p.State) > 0 {
			if err := json.Unmarshal(p.State, &st); err != nil {
				errs = append(errs, fmt.Errorf("device %s: checkpoint state: %w", p.Device, err))
				continue
			}
		}
		switch d.kind {
		case kindMIG:
			if err := b.destroyMIG(ctx, d, st.GPUInstance); err != nil {
				errs = append(errs, fmt.Errorf("device %s: %w", p.Device, err))
			}
		case kindGPU:
			if st.Strategy != "" {
				if err := b.stopSharing(ctx, d.gpu, sharingStrategy(st.Strategy)); err != nil {
					errs = append(errs, fmt.Errorf("device %s: %w", p.Device, err))
				}
			}
		}
	}
	if err := b.removeClaimFiles(claim); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Reconcile implements plugin.Reconciler: at start-up it destroys MIG
// instances and removes per-claim files that no prepared claim owns (left
// by a crash between creating them and recording them), and recounts the
// users of each MPS daemon.
func (b *Backend) Reconcile(ctx context.Context, prepared []plugin.ClaimState) error {
	if _, err := b.Discover(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	owned := map[string]map[uint32]bool{} // GPU name -> owned GPU instance ids
	claims := map[string]bool{}
	b.mpsUsers, b.nonMPSUsers = map[string]int{}, map[string]int{}
	for _, c := range prepared {
		claims[string(c.UID)] = true
		for _, p := range c.Devices {
			d, ok := b.devices[p.Device]
			if !ok || len(p.State) == 0 {
				continue
			}
			var st deviceState
			if err := json.Unmarshal(p.State, &st); err != nil {
				continue
			}
			if d.kind == kindMIG && st.GPUInstance != nil {
				if owned[d.gpu.name] == nil {
					owned[d.gpu.name] = map[uint32]bool{}
				}
				owned[d.gpu.name][*st.GPUInstance] = true
			}
			if d.kind == kindGPU && st.Strategy != "" {
				if sharingStrategy(st.Strategy) == strategyMPS {
					b.mpsUsers[d.gpu.name]++
				} else {
					b.nonMPSUsers[d.gpu.name]++
				}
			}
		}
	}
	var errs []error
	for _, g := range b.gpus {
		if err := b.destroyUnownedMIG(ctx, g, owned[g.name]); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, b.removeUnownedClaimFiles(ctx, claims), b.stopUnusedMPS(ctx))
	return errors.Join(errs...)
}

// controlEdits are the device nodes every CUDA process needs besides the
// GPU itself.
func (b *Backend) controlEdits() cdispec.ContainerEdits {
	return cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{
			b.node("nvidiactl", b.devs.nvidia, 255),
			b.node("nvidia-uvm", b.devs.uvm, 0),
			b.node("nvidia-uvm-tools", b.devs.uvm, 1),
		},
		Env: []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
	}
}

// node describes a character device fully (type, major, minor), so the
// runtime does not need to stat the host to inject it.
func (b *Backend) node(name string, major, minor int64) *cdispec.DeviceNode {
	return &cdispec.DeviceNode{
		Path:     "/dev/" + name,
		HostPath: filepath.Join(b.cfg.DevRoot, "dev", name),
		Type:     "c",
		Major:    major,
		Minor:    minor,
	}
}

func claimRef(c *resourceapi.ResourceClaim) plugin.ClaimRef {
	if c == nil {
		return plugin.ClaimRef{}
	}
	return plugin.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
}

func mergeEdits(a, b cdispec.ContainerEdits) cdispec.ContainerEdits {
	a.Env = append(a.Env, b.Env...)
	a.DeviceNodes = append(a.DeviceNodes, b.DeviceNodes...)
	a.Mounts = append(a.Mounts, b.Mounts...)
	return a
}
