// Package nvidiapreset runs the NVIDIA kubelet plugin's backend on a
// hardware preset (its fake sysfs and procfs, its NVML mock) and lays the
// inventory out as the plugin's ResourceSlices, so that scheduling code
// is exercised on what the plugin publishes for a real machine's layout.
package nvidiapreset

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/nvidia"
	nvidiaapp "github.com/strata-sh/strata/drivers/nvidia/app"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

// Discover runs the NVIDIA plugin backend on a hardware preset: the
// preset's fake sysfs and procfs in a temporary folder and its NVML
// mock, in a MIG mode ("" for the nvidia-kubelet-plugin binary's
// default).
func Discover(ctx context.Context, preset string, migMode nvidia.MIGMode) (*plugin.Inventory, error) {
	m, err := hardware.Lookup(preset)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "strata-"+preset+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		return nil, err
	}
	srv, err := nvmlmock.New(m, preset)
	if err != nil {
		return nil, err
	}
	mode := migMode
	if mode == "" {
		if mode, err = nvidia.ParseMIGMode(nvidiaapp.NewOptions().MIGMode); err != nil {
			return nil, err
		}
	}
	b, err := nvidia.New(nvidia.Config{
		NVML:                 srv,
		SysfsRoot:            filepath.Join(root, hardware.SysDir),
		ProcRoot:             filepath.Join(root, hardware.ProcDir),
		DevRoot:              root,
		StateDir:             filepath.Join(root, "state"),
		FabricPartitionsFile: filepath.Join(root, hardware.FabricPartitionsFile),
		MIG:                  mode,
	})
	if err != nil {
		return nil, fmt.Errorf("NVIDIA backend on %s: %w", preset, err)
	}
	defer b.Close()
	inv, err := b.Discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", preset, err)
	}
	return inv, nil
}

// Slices lays an inventory out as the plugin publishes it on a node, with
// a UID and resourceVersion as the API server would give them (the
// scheduler's plugins cache what they work out per slice version).
func Slices(node string, inv *plugin.Inventory) ([]*resourceapi.ResourceSlice, error) {
	s, err := plugin.ResourceSlices(nvidia.DriverName, node, inv)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	for _, slice := range s {
		slice.UID, slice.ResourceVersion = types.UID("slice-"+slice.Name), "1"
	}
	return s, nil
}

// PlacementDevice names the device of a MIG placement (dynamic MIG mode)
// on a node's GPU: the profile's placement that starts at a memory slice
// on the GPU of an index.
func PlacementDevice(all []*resourceapi.ResourceSlice, node string, gpu int64, profile string, start int64) (string, error) {
	str := func(d resourceapi.Device, name resourceapi.QualifiedName) string {
		return ptr.Deref(d.Attributes[name].StringValue, "")
	}
	for _, s := range all {
		if ptr.Deref(s.Spec.NodeName, "") != node {
			continue
		}
		parent := ""
		for _, d := range s.Spec.Devices {
			if str(d, "type") == "gpu" && ptr.Deref(d.Attributes["index"].IntValue, -1) == gpu {
				parent = str(d, "uuid")
			}
		}
		for _, d := range s.Spec.Devices {
			if parent != "" && str(d, "type") == "mig" && str(d, "parentUUID") == parent && str(d, "profile") == profile &&
				ptr.Deref(d.Attributes["placementStart"].IntValue, -1) == start {
				return d.Name, nil
			}
		}
	}
	return "", fmt.Errorf("node %s publishes no %s placement at slice %d of GPU %d", node, profile, start, gpu)
}
