// Package nvidia is the NVIDIA GPU backend of Strata's kubelet plugin
// (driver nvidia.strata.sh). It discovers GPUs through NVML and sysfs and
// publishes each GPU as one device with consumable capacity, used whole or
// shared, and MIG as the MIG mode of the node says: static (the existing
// instances, made by an operator) or dynamic (one device per MIG
// placement, drawing on the GPU's shared counters so that whole, shared
// and MIG use exclude each other). It prepares devices for containers
// through CDI: dynamic MIG instances are created and destroyed with NVML,
// shared GPUs get HAMi-core, MPS or time-slicing limits.
package nvidia

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
)

// DriverName is the DRA driver name of this backend.
const DriverName = "nvidia.strata.sh"

// AcceleratorDomain is the vendor-neutral attribute domain that every
// Strata accelerator driver publishes (package accelerator).
const AcceleratorDomain = accelerator.Domain

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
	// HAMiCoreCheck is where the plugin sees that library, to check that
	// it is there before it tells a container to load it; empty skips the
	// check.
	HAMiCoreCheck string
	// MPS starts and stops MPS control daemons; nil disables MPS sharing.
	MPS MPSControl
	// MIG says who manages MIG instances: static (default) or dynamic.
	MIG MIGMode
	// TimeSlice sets GPU time slices for TimeSlicing claims; nil refuses
	// an interval other than Default.
	TimeSlice TimeSliceControl
	// HealthInterval is how often GPUs are probed; XIDHoldDown is how long
	// a critical XID keeps a GPU tainted after the last occurrence.
	HealthInterval time.Duration
	XIDHoldDown    time.Duration
}

// Backend implements plugin.Backend for NVIDIA GPUs.
type Backend struct {
	cfg  Config
	gpus []*gpu
	// unusable are the GPUs that could not be read at start-up, left out.
	unusable []error
	byName   map[string]*gpu
	devs     devNumbers
	health   *healthState

	// mu guards devices, the users of sharing mechanisms, recorded and
	// the hardware changes of prepare and unprepare.
	mu          sync.Mutex
	devices     map[string]*device
	mpsUsers    map[string]int // GPU name -> claims using its MPS daemon
	nonMPSUsers map[string]int // GPU name -> other claims sharing it
	// timeSliced counts the claims time-slicing each GPU, and the
	// interval they set.
	timeSliced map[string]timeSliceUse
	// recorded names the MIG placement devices the checkpoint says the
	// plugin prepared or was preparing: in dynamic mode an instance on
	// such a placement is the plugin's own, every other one is left
	// alone.
	recorded map[string]bool
	// layout fingerprints the MIG state that shapes the published devices
	// (MIG mode and instances the plugin did not make).
	layout string
	// lastViews is each MIG-capable GPU's MIG state as last read, used
	// while the GPU cannot be read.
	lastViews map[string]gpuView
}

var (
	_ plugin.Backend       = (*Backend)(nil)
	_ plugin.Reconciler    = (*Backend)(nil)
	_ plugin.HealthWatcher = (*Backend)(nil)
	_ plugin.Restorer      = (*Backend)(nil)
	_ plugin.Configurable  = (*Backend)(nil)
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
	mode, err := ParseMIGMode(string(cfg.MIG))
	if err != nil {
		return nil, err
	}
	cfg.MIG = mode
	if ret := cfg.NVML.Init(); ret != nvml.SUCCESS {
		return nil, nvmlError("init", ret)
	}
	devs, err := readDevNumbers(cfg.ProcRoot)
	if err != nil {
		return nil, err
	}
	gpus, unusable, err := discoverGPUs(cfg.NVML, pci.NewReader(cfg.SysfsRoot))
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
	b := &Backend{cfg: cfg, gpus: gpus, unusable: unusable, byName: map[string]*gpu{}, devs: devs,
		mpsUsers: map[string]int{}, nonMPSUsers: map[string]int{}, timeSliced: map[string]timeSliceUse{}, recorded: map[string]bool{},
		lastViews: map[string]gpuView{}}
	for _, g := range gpus {
		g.partitions = parts[g.topology.BusID]
		b.byName[g.name] = g
	}
	b.health = newHealthState(gpus, cfg.XIDHoldDown)
	return b, nil
}

// Unusable returns why each GPU that could not be read at start-up was
// left out.
func (b *Backend) Unusable() []error { return b.unusable }

// Close releases NVML.
func (b *Backend) Close() { b.cfg.NVML.Shutdown() }

// Discover implements plugin.Backend. GPUs are enumerated once at start;
// what changes afterwards is their health, which becomes device taints,
// and their MIG layout (static mode, or instances the plugin did not
// make), which changes the devices.
func (b *Backend) Discover(_ context.Context) (*plugin.Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	views, fingerprint, err := b.viewsLocked()
	if err != nil {
		return nil, err
	}
	set, err := buildDevices(b.gpus, views, b.health.taints(), b.cfg.MIG)
	if err != nil {
		return nil, err
	}
	b.devices = set.byName
	b.layout = fingerprint
	return &plugin.Inventory{Devices: set.devices, SharedCounters: set.counters}, nil
}

// viewsLocked reads the MIG mode and instances of every MIG-capable GPU,
// and fingerprints what of it shapes the published devices. A GPU that
// cannot be read (fallen off the bus, an NVML error) keeps the view it
// last had, and its health says why, so that its devices are published
// tainted and every other GPU keeps serving.
func (b *Backend) viewsLocked() (map[string]gpuView, string, error) {
	views := map[string]gpuView{}
	var fp strings.Builder
	for _, g := range b.gpus {
		if g.mig == nil {
			continue
		}
		v, err := b.readView(g)
		failed := err != nil
		b.health.update(g.name, func(h *gpuHealth) { h.unreadable = failed })
		if failed {
			v = b.lastViews[g.name]
		} else {
			b.lastViews[g.name] = v
		}
		views[g.name] = v
		fmt.Fprintf(&fp, "%s:", g.name)
		if failed {
			fp.WriteString("unreadable:")
		}
		if b.cfg.MIG == MIGStatic {
			fmt.Fprintf(&fp, "%t:", v.migEnabled)
		}
		for _, f := range v.foreign {
			fmt.Fprintf(&fp, "%s@%d/%d/%d,", f.profile.name, f.placement.Start, f.gi, f.ci)
		}
		fp.WriteString(";")
	}
	return views, fp.String(), nil
}

// readView reads one GPU's MIG mode and the instances the plugin did not
// make.
func (b *Backend) readView(g *gpu) (gpuView, error) {
	enabled, err := migEnabled(g)
	if err != nil {
		return gpuView{}, err
	}
	// A GPU outside MIG mode has no instances; not asking saves a call per
	// MIG profile on every health probe.
	var instances []migInstance
	if enabled {
		if instances, err = listInstances(g); err != nil {
			return gpuView{}, err
		}
	}
	v := gpuView{migEnabled: enabled}
	for _, inst := range instances {
		if b.cfg.MIG != MIGDynamic || !b.recorded[migDeviceName(g, inst.profile, inst.placement)] {
			v.foreign = append(v.foreign, inst)
		}
	}
	return v, nil
}

// layoutChanged reports whether the MIG layout moved since the last
// Discover, for the health watch to republish.
func (b *Backend) layoutChanged() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, fp, err := b.viewsLocked()
	return err == nil && fp != b.layout
}

// Restore implements plugin.Restorer: before the first Discover the
// plugin hands over every claim of its checkpoint, prepared or being
// prepared, so that in dynamic mode the instances on their placements are
// known to be the plugin's own (an interrupted prepare may have made one)
// and everything else is left alone.
func (b *Backend) Restore(_ context.Context, claims []plugin.ClaimState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recorded = recordedDevices(claims)
}

func recordedDevices(claims []plugin.ClaimState) map[string]bool {
	out := map[string]bool{}
	for _, c := range claims {
		for _, d := range c.Devices {
			out[d.Device] = true
		}
	}
	return out
}

// deviceState is what the checkpoint keeps about a prepared device.
type deviceState struct {
	Kind deviceKind `json:"kind"`
	// GPUInstance and ComputeInstance are the ids of a MIG device's
	// instances; Created says the plugin made them for this claim (dynamic
	// mode) and destroys them at unprepare.
	GPUInstance     *uint32 `json:"gpuInstance,omitempty"`
	ComputeInstance *uint32 `json:"computeInstance,omitempty"`
	Created         bool    `json:"created,omitempty"`
	// Strategy is a shared device's isolation, and TimeSlice the interval
	// a TimeSlicing claim set.
	Strategy  string `json:"strategy,omitempty"`
	TimeSlice string `json:"timeSlice,omitempty"`
}

// Prepare implements plugin.Backend. Devices are prepared in order; if
// one fails, the ones before it are released again. Every device carries
// its own edits — device nodes and, for a shared GPU, its limits — so a
// container that uses one request of a claim sees only that request's
// devices; the claim-wide edits are the control devices every CUDA
// process needs.
func (b *Backend) Prepare(ctx context.Context, req *plugin.PrepareRequest) (*plugin.PrepareResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	resp := &plugin.PrepareResponse{Common: b.controlEdits()}
	claim := plugin.ClaimRefOf(req.Claim)
	for _, a := range req.Devices {
		prepared, err := b.prepareDevice(ctx, claim, a)
		if err != nil {
			b.releaseLocked(ctx, claim, resp.Devices)
			return nil, fmt.Errorf("device %s: %w", a.Device, err)
		}
		resp.Devices = append(resp.Devices, prepared)
	}
	return resp, nil
}

// Validate implements plugin.Validator: unknown devices and bad opaque
// configurations are refused before the plugin records anything.
func (b *Backend) Validate(_ context.Context, req *plugin.PrepareRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	mps := 0
	for _, a := range req.Devices {
		strategy, err := b.validateDevice(a)
		if err != nil {
			return fmt.Errorf("device %s: %w", a.Device, err)
		}
		if strategy == strategyMPS {
			if mps++; mps > 1 {
				return fmt.Errorf("device %s: %w", a.Device, errTwoMPS)
			}
		}
	}
	return nil
}

// validateDevice checks one device and returns its sharing strategy.
func (b *Backend) validateDevice(a plugin.AllocatedDevice) (sharingStrategy, error) {
	d, ok := b.devices[a.Device]
	if !ok {
		return "", errNotOnNode
	}
	cfg := gpuConfig(a)
	switch d.kind {
	case kindGPU:
		s, err := b.sharedLimits(d, a, cfg)
		if err == nil && s.strategy == strategyHAMiCore {
			err = b.checkHAMiCore()
		}
		return s.strategy, err
	case kindMIG:
		if cfg.Sharing != nil {
			return "", errSharingOnMIG
		}
	}
	return "", nil
}

// checkHAMiCore makes sure the HAMi-core library is an ELF shared object
// on the node before a container is told to preload it: a missing one
// makes every program in the container fail to start, far from the
// cause.
func (b *Backend) checkHAMiCore() error {
	if b.cfg.HAMiCoreCheck == "" {
		return nil
	}
	f, err := elf.Open(b.cfg.HAMiCoreCheck)
	if err != nil {
		return fmt.Errorf("sharing: HAMi-core's library %s cannot be used on this node (%v): install HAMi-core there (--hami-core-library), or share the GPU with MPS or TimeSlicing", b.cfg.HAMiCoreLibrary, err)
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return fmt.Errorf("sharing: HAMi-core's library %s is not a shared library (%s)", b.cfg.HAMiCoreLibrary, f.Type)
	}
	return nil
}

var (
	errTwoMPS       = errors.New("sharing: a claim may hold one MPS GPU (its clients connect to one MPS server)")
	errNotOnNode    = errors.New("not a device of this node")
	errSharingOnMIG = errors.New("sharing: only GPUs take a sharing configuration; this is a MIG device")
)

func (b *Backend) prepareDevice(ctx context.Context, claim plugin.ClaimRef, a plugin.AllocatedDevice) (plugin.PreparedDevice, error) {
	out := a.Prepared()
	d, ok := b.devices[a.Device]
	if !ok {
		return out, errNotOnNode
	}
	cfg := gpuConfig(a)
	st := deviceState{Kind: d.kind}
	gpuNode := b.node(fmt.Sprintf("nvidia%d", d.gpu.minor), b.devs.nvidia, int64(d.gpu.minor))
	switch d.kind {
	case kindGPU:
		if err := b.wholeGPUReady(d.gpu); err != nil {
			return out, err
		}
		s, err := b.sharedLimits(d, a, cfg)
		if err != nil {
			return out, err
		}
		out.Edits.DeviceNodes = []*cdispec.DeviceNode{gpuNode}
		// All of the memory (so nobody shares the GPU), no compute limit
		// asked for and no sharing config: the claim has the GPU to itself
		// and needs no limits.
		if cfg.Sharing == nil && s.memory == int64(d.gpu.memoryBytes) && (!s.reserved || s.cores == sharedCores) {
			break
		}
		if err := b.startSharing(ctx, d.gpu, s); err != nil {
			return out, err
		}
		st.Strategy, st.TimeSlice = string(s.strategy), string(s.timeSlice)
		edits, err := b.sharingEdits(claim, s)
		if err != nil {
			_ = b.stopSharing(ctx, d.gpu, st)
			return out, err
		}
		out.Edits = mergeEdits(out.Edits, edits)
	case kindMIG:
		if cfg.Sharing != nil {
			return out, errSharingOnMIG
		}
		gi, ci, created, err := b.migInstance(ctx, d)
		if err != nil {
			return out, err
		}
		st.GPUInstance, st.ComputeInstance, st.Created = &gi, &ci, created
		nodes, err := b.migNodes(d.gpu, gi, ci)
		if err != nil {
			if created {
				_ = b.destroyMIG(ctx, d, &gi)
			}
			return out, err
		}
		out.Edits.DeviceNodes = append([]*cdispec.DeviceNode{gpuNode}, nodes...)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return out, err
	}
	out.State = raw
	return out, nil
}

// wholeGPUReady makes sure a GPU can be used whole or shared: out of MIG
// mode. In dynamic mode the plugin switches MIG mode off (the counters
// guarantee that no MIG claim holds the GPU); in static mode it never
// does: a GPU an operator put into MIG mode after discovery is refused.
func (b *Backend) wholeGPUReady(g *gpu) error {
	if b.cfg.MIG == MIGDynamic {
		return b.setMIGMode(g, false)
	}
	enabled, err := migEnabled(g)
	if err != nil {
		return err
	}
	if enabled {
		return fmt.Errorf("GPU %s is in MIG mode; with static MIG the plugin does not change MIG mode and offers the GPU only as its MIG devices", g.name)
	}
	return nil
}

// migInstance returns the GPU and compute instance of a MIG device:
// the existing one for an instance the plugin did not make, a new one
// for a dynamic placement.
func (b *Backend) migInstance(ctx context.Context, d *device) (gi, ci uint32, created bool, err error) {
	if d.existing != nil {
		if _, ret := d.gpu.handle.GetGpuInstanceById(int(d.existing.gi)); ret != nvml.SUCCESS {
			return 0, 0, false, fmt.Errorf("MIG instance %d (%s at %d) of %s is gone: %s", d.existing.gi, d.profile.name, d.placement.Start, d.gpu.name, nvml.ErrorString(ret))
		}
		return d.existing.gi, d.existing.ci, false, nil
	}
	if b.cfg.MIG != MIGDynamic {
		return 0, 0, false, fmt.Errorf("MIG device %s does not exist and static MIG never creates instances", d.name)
	}
	// Recorded before it exists: the instance is the plugin's own from
	// the moment it appears.
	b.recorded[d.name] = true
	gi, ci, err = b.createMIG(ctx, d)
	if err != nil {
		delete(b.recorded, d.name)
	}
	return gi, ci, err == nil, err
}

func stateOf(p plugin.PreparedDevice) deviceState {
	var st deviceState
	_ = json.Unmarshal(p.State, &st)
	return st
}

// Unprepare implements plugin.Backend.
func (b *Backend) Unprepare(ctx context.Context, claim plugin.ClaimRef, devices []plugin.PreparedDevice) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.releaseLocked(ctx, claim, devices)
}

// releaseLocked undoes what prepare did for each device and for the
// claim. Devices without State (an interrupted prepare) are found by
// identity: a dynamic MIG device's instance by its profile and placement.
// Only instances the plugin made are destroyed.
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
			interrupted := len(p.State) == 0 && b.cfg.MIG == MIGDynamic && d.existing == nil
			if st.Created || interrupted {
				if err := b.destroyMIG(ctx, d, st.GPUInstance); err != nil {
					errs = append(errs, fmt.Errorf("device %s: %w", p.Device, err))
					continue
				}
				delete(b.recorded, d.name)
			}
		case kindGPU:
			if st.Strategy != "" {
				if err := b.stopSharing(ctx, d.gpu, st); err != nil {
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

// Reconcile implements plugin.Reconciler: after the interrupted prepares
// were rolled back, the plugin's own instances are exactly those of the
// prepared claims. Per-claim files that no prepared claim owns are
// removed and the users of each MPS daemon and time slice are recounted.
// No MIG instance is destroyed here: one the plugin did not record is not
// its own.
func (b *Backend) Reconcile(ctx context.Context, prepared []plugin.ClaimState) error {
	b.mu.Lock()
	b.recorded = recordedDevices(prepared)
	b.mu.Unlock()
	if _, err := b.Discover(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	claims := map[string]bool{}
	b.mpsUsers, b.nonMPSUsers, b.timeSliced = map[string]int{}, map[string]int{}, map[string]timeSliceUse{}
	for _, c := range prepared {
		claims[string(c.UID)] = true
		for _, p := range c.Devices {
			d, ok := b.devices[p.Device]
			if !ok || len(p.State) == 0 || d.kind != kindGPU {
				continue
			}
			st := stateOf(p)
			if st.Strategy != "" {
				b.countSharing(d.gpu, st, +1)
			}
		}
	}
	b.reconcileMPSLocked(ctx)
	return b.removeUnownedClaimFiles(ctx, claims)
}

// controlEdits are the device nodes every CUDA process needs besides the
// GPU itself. NVIDIA_VISIBLE_DEVICES=void keeps the NVIDIA container
// runtime hook, where one is installed, from adding GPUs of its own (CUDA
// images set the variable to "all"): a container sees exactly the device
// nodes of the devices it was given.
func (b *Backend) controlEdits() cdispec.ContainerEdits {
	return cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{
			b.node("nvidiactl", b.devs.nvidia, 255),
			b.node("nvidia-uvm", b.devs.uvm, 0),
			b.node("nvidia-uvm-tools", b.devs.uvm, 1),
		},
		Env: []string{"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
	}
}

// node is the character device /dev/<name>.
func (b *Backend) node(name string, major, minor int64) *cdispec.DeviceNode {
	return plugin.CharDeviceNode(b.cfg.DevRoot, "/dev/"+name, major, minor)
}

func mergeEdits(a, b cdispec.ContainerEdits) cdispec.ContainerEdits {
	a.Env = append(a.Env, b.Env...)
	a.DeviceNodes = append(a.DeviceNodes, b.DeviceNodes...)
	a.Mounts = append(a.Mounts, b.Mounts...)
	return a
}
