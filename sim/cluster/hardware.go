package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/strata-sh/strata/drivers/ascend"
	ascendapp "github.com/strata-sh/strata/drivers/ascend/app"
	"github.com/strata-sh/strata/drivers/cambricon"
	cambriconapp "github.com/strata-sh/strata/drivers/cambricon/app"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/nvidia/app"
	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
	"github.com/strata-sh/strata/drivers/rdma"
	rdmaapp "github.com/strata-sh/strata/drivers/rdma/app"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/cnmonmock"
	"github.com/strata-sh/strata/hardware/linkmock"
	"github.com/strata-sh/strata/hardware/npusmimock"
	"github.com/strata-sh/strata/hardware/nvmlmock"
	"github.com/strata-sh/strata/sim/node"
)

// NodeHardware is the fake hardware of one simulated node. It outlives the
// node's plugins, so state such as MIG instances survives a plugin
// restart as it does on a real machine.
type NodeHardware struct {
	Machine hardware.Machine
	// NVML is the node's NVML mock, nil on nodes without NVIDIA GPUs.
	NVML *nvmlmock.Server
	// MPS records the node's MPS control daemons.
	MPS *nvmlmock.MPS
	// BootID is the node's current boot id.
	BootID string
	// MIG is the NVIDIA plugin's MIG mode.
	MIG nvidia.MIGMode
	// TimeSlices records GPU time slices set for TimeSlicing claims.
	TimeSlices *nvmlmock.TimeSlices
	// Links are the node's NICs as netlink shows them (VF settings,
	// MTUs), nil unless the RDMA plugin runs.
	Links *linkmock.Links
	// NPUSMI is the node's npu-smi, nil on nodes without Ascend NPUs.
	NPUSMI *npusmimock.NPUSMI
	// CNMON is the node's cnmon, nil on nodes without Cambricon MLUs.
	CNMON *cnmonmock.CNMON
}

// Health monitoring periods of simulated NVIDIA nodes: shorter than on a
// real node (5 s) so that health changes show within a test, long enough
// that a thousand idle nodes probing their GPUs leave the CPU to the
// control plane.
var (
	HealthInterval = time.Second
	XIDHoldDown    = 5 * time.Second
)

// NodeSpecs expands the cluster's simulated node groups into node specs,
// in group order.
func (c *Cluster) NodeSpecs() ([]node.Spec, error) {
	var specs []node.Spec
	for _, g := range c.NodeGroups {
		if g.Real {
			// Real nodes are started by package sim with realnode.
			continue
		}
		for i := 0; i < g.Count; i++ {
			spec := node.Spec{
				Name:     g.NodeName(i),
				Labels:   g.NodeLabels(i),
				Taints:   g.Taints,
				Capacity: g.Capacity(),
			}
			if g.Hardware != "" {
				if err := withHardware(&spec, g, fmt.Sprintf("nodeGroups[%s]", g.Name)); err != nil {
					return nil, err
				}
			}
			specs = append(specs, spec)
		}
	}
	return specs, nil
}

// withHardware attaches a hardware preset: the fake sysfs/procfs written
// before plugins start, and the kubelet plugins of the devices it has.
func withHardware(spec *node.Spec, g NodeGroup, where string) error {
	m, err := hardware.Lookup(g.Hardware)
	if err != nil {
		return err
	}
	mode, err := nvidia.ParseMIGMode(g.MIG)
	if err != nil {
		return fmt.Errorf("%s.mig: %w", where, err)
	}
	hw := &NodeHardware{
		Machine: m,
		MIG:     mode,
		BootID:  uuid.NewSHA1(uuid.NameSpaceOID, []byte("boot/"+spec.Name)).String(),
	}
	if len(m.GPUs()) > 0 {
		if hw.NVML, err = nvmlmock.New(m, spec.Name); err != nil {
			return err
		}
		if err := applyMIGConfig(hw.NVML, len(m.GPUs()), g.MIGConfig, where); err != nil {
			return err
		}
		hw.MPS = nvmlmock.NewMPS()
		hw.TimeSlices = nvmlmock.NewTimeSlices()
		spec.Plugins = append(spec.Plugins, node.PluginFactory{Driver: nvidia.DriverName, Start: hw.startNVIDIA})
	}
	if len(m.NPUs()) > 0 {
		if hw.NPUSMI, err = npusmimock.New(m.NPUModel, len(m.NPUs())); err != nil {
			return fmt.Errorf("%s.hardware: %w", where, err)
		}
		spec.Plugins = append(spec.Plugins, node.PluginFactory{Driver: ascend.DriverName, Start: hw.startAscend})
	}
	if len(m.MLUs()) > 0 {
		if hw.CNMON, err = cnmonmock.New(len(m.MLUs())); err != nil {
			return fmt.Errorf("%s.hardware: %w", where, err)
		}
		spec.Plugins = append(spec.Plugins, node.PluginFactory{Driver: cambricon.DriverName, Start: hw.startCambricon})
	}
	if g.RDMA {
		hw.Links = linkmock.New(m)
		spec.Plugins = append(spec.Plugins, node.PluginFactory{Driver: rdma.DriverName, Start: hw.startRDMA})
	}
	spec.Hardware = hw
	spec.Prepare = func(env node.PluginEnv) error {
		if err := writeMachineOnce(hw.machineDir(env), m); err != nil {
			return err
		}
		return hardware.WriteBootID(env.Root, hw.BootID)
	}
	return nil
}

// machineDir is where the node's fake sysfs and procfs are: one copy per
// hardware layout, shared by the cluster's nodes of that layout (written
// once instead of a thousand times, and read-only like the real ones).
// Only the boot id, under the node's root, is the node's own.
func (hw *NodeHardware) machineDir(env node.PluginEnv) string {
	return filepath.Join(env.SharedDir, hw.Machine.Name)
}

// machineTreeMu serializes writing shared machine directories.
var machineTreeMu sync.Mutex

// writeMachineOnce writes a machine directory unless a complete one is
// there already (a work directory used again keeps it).
func writeMachineOnce(dir string, m hardware.Machine) error {
	machineTreeMu.Lock()
	defer machineTreeMu.Unlock()
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		return nil
	}
	if err := hardware.WriteMachine(dir, m); err != nil {
		return err
	}
	return os.WriteFile(done, nil, 0o644)
}

// startNVIDIA starts the node's NVIDIA plugin through the binary's own
// composition root, with the node's directories and its mock hardware.
func (hw *NodeHardware) startNVIDIA(ctx context.Context, env node.PluginEnv) (node.Plugin, error) {
	o := app.NewOptions()
	o.Options = pluginOptions(o.Options, env, nvidia.DriverName)
	o.SysfsRoot = filepath.Join(hw.machineDir(env), hardware.SysDir)
	o.ProcRoot = filepath.Join(hw.machineDir(env), hardware.ProcDir)
	o.DevRoot = env.Root
	o.FabricPartitionsFile = filepath.Join(hw.machineDir(env), hardware.FabricPartitionsFile)
	o.HAMiCoreLibrary = filepath.Join(env.Root, "usr/local/vgpu/libvgpu.so")
	o.MIGMode = string(hw.MIG)
	o.HealthInterval, o.XIDHoldDown = HealthInterval, XIDHoldDown
	return app.Start(ctx, o, env.Client, app.Host{NVML: hw.NVML, MPS: hw.MPS, TimeSlice: hw.TimeSlices, Events: env.Events})
}

// startRDMA starts the node's RDMA plugin through the binary's own
// composition root, with the node's directories and its fake links.
func (hw *NodeHardware) startRDMA(ctx context.Context, env node.PluginEnv) (node.Plugin, error) {
	o := rdmaapp.NewOptions()
	o.Options = pluginOptions(o.Options, env, rdma.DriverName)
	o.SysfsRoot = filepath.Join(hw.machineDir(env), hardware.SysDir)
	o.DevRoot = env.Root
	o.HealthInterval = HealthInterval
	return rdmaapp.Start(ctx, o, env.Client, rdmaapp.Host{Links: hw.Links, Events: env.Events})
}

// startAscend starts the node's Ascend plugin through the binary's own
// composition root, with the node's directories and its npu-smi fake.
func (hw *NodeHardware) startAscend(ctx context.Context, env node.PluginEnv) (node.Plugin, error) {
	o := ascendapp.NewOptions()
	o.Options = pluginOptions(o.Options, env, ascend.DriverName)
	o.SysfsRoot = filepath.Join(hw.machineDir(env), hardware.SysDir)
	o.ProcRoot = filepath.Join(hw.machineDir(env), hardware.ProcDir)
	o.DevRoot = env.Root
	o.HealthInterval = HealthInterval
	return ascendapp.Start(ctx, o, env.Client, ascendapp.Host{NPUSMI: hw.NPUSMI, Events: env.Events})
}

// startCambricon starts the node's Cambricon plugin through the binary's
// own composition root, with the node's directories and its cnmon fake.
func (hw *NodeHardware) startCambricon(ctx context.Context, env node.PluginEnv) (node.Plugin, error) {
	o := cambriconapp.NewOptions()
	o.Options = pluginOptions(o.Options, env, cambricon.DriverName)
	o.SysfsRoot = filepath.Join(hw.machineDir(env), hardware.SysDir)
	o.ProcRoot = filepath.Join(hw.machineDir(env), hardware.ProcDir)
	o.DevRoot = env.Root
	// The node's sMLU capability nodes, listed as the kernel lists them.
	o.DevCharDir = filepath.Join(env.Root, hardware.SysDir, "dev", "char")
	hw.CNMON.PublishCapabilityNodes(o.DevCharDir, hardware.CambriconCapMajor)
	o.HealthInterval = HealthInterval
	return cambriconapp.Start(ctx, o, env.Client, cambriconapp.Host{CNMON: hw.CNMON, Events: env.Events})
}

// pluginOptions sets what every plugin on a simulated node takes from the
// node: its name and UID, its folders and boot id; no metrics server.
func pluginOptions(o pluginmain.Options, env node.PluginEnv, driver string) pluginmain.Options {
	o.NodeName, o.NodeUID = env.NodeName, env.NodeUID
	o.PluginDataDir = env.PluginDir(driver)
	o.RegistrarDir = env.RegistryDir
	o.CDIDir = env.CDIDir
	o.BootIDPath = filepath.Join(env.Root, hardware.BootIDFile)
	o.MetricsAddress = ""
	return o
}

// applyMIGConfig makes the instances a MIG manager would have made.
func applyMIGConfig(srv *nvmlmock.Server, gpus int, config []MIGDevices, where string) error {
	for j, m := range config {
		devices := m.Devices
		if len(devices) == 0 {
			for i := 0; i < gpus; i++ {
				devices = append(devices, i)
			}
		}
		for _, i := range devices {
			if i < 0 || i >= gpus {
				return fmt.Errorf("%s.migConfig[%d].devices: GPU %d is not one of the node's %d GPUs", where, j, i, gpus)
			}
			if err := srv.ApplyMIGConfig(i, m.MIGDevices); err != nil {
				return fmt.Errorf("%s.migConfig[%d]: %w", where, j, err)
			}
		}
	}
	return nil
}
