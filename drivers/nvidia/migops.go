package nvidia

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// setMIGMode switches a GPU's MIG mode if needed. The allocator's counters
// guarantee that no other claim uses the GPU in the other mode; a GPU that
// still has instances cannot leave MIG mode.
func (b *Backend) setMIGMode(g *gpu, enabled bool) error {
	if g.mig == nil {
		if enabled {
			return fmt.Errorf("GPU %s does not support MIG", g.name)
		}
		return nil
	}
	want := nvml.DEVICE_MIG_DISABLE
	if enabled {
		want = nvml.DEVICE_MIG_ENABLE
	}
	current, _, ret := g.handle.GetMigMode()
	if ret != nvml.SUCCESS {
		return nvmlError("get MIG mode of "+g.name, ret)
	}
	if current == want {
		return nil
	}
	if !enabled {
		if instances, err := listInstances(g); err != nil {
			return err
		} else if n := len(instances); n > 0 {
			return fmt.Errorf("GPU %s still has %d MIG instances", g.name, n)
		}
	}
	activation, ret := g.handle.SetMigMode(want)
	if ret != nvml.SUCCESS {
		return nvmlError("set MIG mode of "+g.name, ret)
	}
	// The switch may not take effect: NVML reports why in the activation
	// status (IN_USE while something holds the GPU open, RESET_REQUIRED
	// where it cannot reset the GPU itself) and leaves the mode pending.
	// Read the mode again rather than trust either.
	now, pending, ret := g.handle.GetMigMode()
	if ret != nvml.SUCCESS {
		return nvmlError("get MIG mode of "+g.name, ret)
	}
	if activation != nvml.SUCCESS || now != want {
		// Withdraw the pending switch, so that a later GPU reset does not
		// change the mode behind the claims' back.
		if pending != now {
			g.handle.SetMigMode(now)
		}
		return fmt.Errorf("GPU %s: MIG mode is %s with %s pending, the switch to %s did not take effect (%s): something holds the GPU open (DCGM, a process) or it needs a reset",
			g.name, migModeName(now), migModeName(pending), migModeName(want), nvml.ErrorString(activation))
	}
	return nil
}

func migModeName(mode int) string {
	if mode == nvml.DEVICE_MIG_ENABLE {
		return "enabled"
	}
	return "disabled"
}

// createMIG creates the GPU instance of a placement and one compute
// instance spanning it.
func (b *Backend) createMIG(ctx context.Context, d *device) (gi, ci uint32, err error) {
	if err := b.setMIGMode(d.gpu, true); err != nil {
		return 0, 0, err
	}
	info := d.profile.info
	placement := d.placement
	inst, ret := d.gpu.handle.CreateGpuInstanceWithPlacement(&info, &placement)
	if ret != nvml.SUCCESS {
		return 0, 0, nvmlError(fmt.Sprintf("create MIG instance %s at %d", d.profile.name, placement.Start), ret)
	}
	giInfo, ret := inst.GetInfo()
	if ret != nvml.SUCCESS {
		inst.Destroy()
		return 0, 0, nvmlError("read MIG instance", ret)
	}
	ciInfo, err := fullComputeProfile(inst, d.profile)
	if err != nil {
		inst.Destroy()
		return 0, 0, err
	}
	cinst, ret := inst.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		inst.Destroy()
		return 0, 0, nvmlError("create compute instance", ret)
	}
	cInfo, ret := cinst.GetInfo()
	if ret != nvml.SUCCESS {
		cinst.Destroy()
		inst.Destroy()
		return 0, 0, nvmlError("read compute instance", ret)
	}
	klog.FromContext(ctx).V(2).Info("Created MIG instance", "gpu", d.gpu.name, "profile", d.profile.name, "placement", placement.Start, "gpuInstance", giInfo.Id, "computeInstance", cInfo.Id)
	return giInfo.Id, cInfo.Id, nil
}

// fullComputeProfile finds the compute instance profile with as many
// slices as the GPU instance.
func fullComputeProfile(inst nvml.GpuInstance, p *migProfile) (nvml.ComputeInstanceProfileInfo, error) {
	for id := nvml.COMPUTE_INSTANCE_PROFILE_COUNT - 1; id >= 0; id-- {
		info, ret := inst.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && info.SliceCount == p.info.SliceCount {
			return info, nil
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, fmt.Errorf("MIG profile %s has no compute instance profile spanning it", p.name)
}

// destroyMIG destroys a device's GPU instance (and its compute instances).
// With gi nil the instance is found by profile and placement. A missing
// instance is not an error.
func (b *Backend) destroyMIG(ctx context.Context, d *device, gi *uint32) error {
	info := d.profile.info
	instances, ret := d.gpu.handle.GetGpuInstances(&info)
	if ret != nvml.SUCCESS {
		return nvmlError("list MIG instances of "+d.gpu.name, ret)
	}
	for _, inst := range instances {
		got, ret := inst.GetInfo()
		if ret != nvml.SUCCESS {
			return nvmlError("read MIG instance", ret)
		}
		if (gi != nil && got.Id == *gi) || (gi == nil && got.Placement.Start == d.placement.Start) {
			if err := destroyInstance(inst); err != nil {
				return err
			}
			klog.FromContext(ctx).V(2).Info("Destroyed MIG instance", "gpu", d.gpu.name, "profile", d.profile.name, "gpuInstance", got.Id)
		}
	}
	return nil
}

func destroyInstance(inst nvml.GpuInstance) error {
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := inst.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := inst.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			continue
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return nvmlError("destroy compute instance", ret)
			}
		}
	}
	if ret := inst.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
		return nvmlError("destroy MIG instance", ret)
	}
	return nil
}

// migNodes are the capability device nodes that give a container access
// to one GPU instance and its compute instance.
func (b *Backend) migNodes(g *gpu, gi, ci uint32) ([]*cdispec.DeviceNode, error) {
	if b.devs.caps == 0 {
		return nil, fmt.Errorf("no nvidia-caps character device: the driver does not expose MIG capabilities")
	}
	var nodes []*cdispec.DeviceNode
	for _, key := range []string{
		fmt.Sprintf("gpu%d/gi%d/access", g.minor, gi),
		fmt.Sprintf("gpu%d/gi%d/ci%d/access", g.minor, gi, ci),
	} {
		minor, ok := b.devs.migMinors[key]
		if !ok {
			return nil, fmt.Errorf("MIG capability %s not in the driver's minor table", key)
		}
		nodes = append(nodes, b.node(fmt.Sprintf("nvidia-caps/nvidia-cap%d", minor), b.devs.caps, minor))
	}
	return nodes, nil
}
