// Package simulated is the machine a kubelet plugin runs on with
// --simulate: a hardware preset (package hardware) laid out on disk as the
// plugin reads a real node (sysfs, /proc/devices, real character device
// nodes made with mknod, a HAMi-core library stand-in) with the vendor
// interfaces answered by the project's fakes: go-nvml's mock servers for
// NVML, npusmimock for npu-smi, cnmonmock for cnmon, linkmock for
// netlink. A platform team can try the whole chart on a cluster without
// accelerators; every device the plugin publishes says it is simulated.
//
// State: vNPUs and sMLUs (the npu-smi and cnmon fakes' state) and the
// GPUs' MIG modes, MIG instances and compute modes (nvmlmock.State) are
// kept in files beside the machine, so they survive plugin restarts and
// are gone after the host reboots (on real GPUs the MIG mode would stay).
// So are the NICs' VF settings and MTUs (linkmock.Snapshot). What it does
// not model: opening a device node fails (no driver backs it); no workload runs on a
// simulated device.
package simulated

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/cnmonmock"
	"github.com/strata-sh/strata/hardware/linkmock"
	"github.com/strata-sh/strata/hardware/npusmimock"
	"github.com/strata-sh/strata/hardware/nvmlmock"
	"github.com/strata-sh/strata/hardware/persist"
)

// Vendor is a device family a plugin drives.
type Vendor string

// The vendors of Strata's plugins.
const (
	NVIDIA    Vendor = "nvidia"
	Ascend    Vendor = "ascend"
	Cambricon Vendor = "cambricon"
	RDMA      Vendor = "rdma"
)

// Where the machine keeps stand-ins for the vendor software a plugin
// mounts into containers, below Root: empty files and folders at the
// paths of a real install, so that containers start as on a real node.
const (
	HAMiCoreLibrary  = "usr/local/vgpu/libvgpu.so"
	AscendDriverRoot = "usr/local/Ascend/driver"
	AscendNPUSMI     = "usr/local/bin/npu-smi"
	AscendDCMI       = "usr/local/dcmi"
	CambriconCNMON   = "usr/bin/cnmon"
)

// standIns are the files (and, ending in "/", folders) of each vendor.
var standIns = map[Vendor][]string{
	NVIDIA:    {HAMiCoreLibrary},
	Ascend:    {AscendDriverRoot + "/lib64/", AscendDriverRoot + "/include/", AscendDriverRoot + "/version.info", AscendNPUSMI, AscendDCMI + "/"},
	Cambricon: {CambriconCNMON},
}

// Machine is a simulated machine on disk with its vendor fakes.
type Machine struct {
	// Root holds the machine's sysfs, procfs and /dev.
	Root   string
	Layout hardware.Machine

	NVML       *nvmlmock.Server
	MPS        *nvmlmock.MPS
	TimeSlices *nvmlmock.TimeSlices
	// NPUSMI and CNMON are the fakes of the vendor tools, their state
	// kept in files below Root.
	NPUSMI *persist.Tool
	CNMON  *persist.Tool
	Links  *linkmock.Links
}

// bootIDFile and the state files are below Root.
const (
	bootIDFile  = ".host-boot-id"
	npusmiState = "npu-smi.state"
	cnmonState  = "cnmon.state"
)

// New lays out preset under root for a plugin of vendor on node and makes
// the fakes of that vendor. The preset must have the vendor's devices.
// hostBootID is the host's boot id: a machine laid out in another boot is
// laid out afresh, its devices' state gone as a reboot clears it.
func New(root, preset, node string, vendor Vendor, hostBootID string) (*Machine, error) {
	layout, err := hardware.Lookup(preset)
	if err != nil {
		return nil, err
	}
	if prev, err := os.ReadFile(filepath.Join(root, bootIDFile)); err != nil || strings.TrimSpace(string(prev)) != hostBootID {
		if err := os.RemoveAll(root); err != nil {
			return nil, err
		}
	}
	m := &Machine{Root: root, Layout: layout}
	switch vendor {
	case NVIDIA:
		if len(layout.GPUs()) == 0 {
			return nil, fmt.Errorf("hardware preset %s has no NVIDIA GPUs", preset)
		}
		if m.NVML, err = nvmlmock.New(layout, node); err != nil {
			return nil, err
		}
		if err := m.keepNVMLState(); err != nil {
			return nil, err
		}
		m.MPS, m.TimeSlices = nvmlmock.NewMPS(), nvmlmock.NewTimeSlices()
	case Ascend:
		if len(layout.NPUs()) == 0 {
			return nil, fmt.Errorf("hardware preset %s has no Ascend NPUs", preset)
		}
	case Cambricon:
		if len(layout.MLUs()) == 0 {
			return nil, fmt.Errorf("hardware preset %s has no Cambricon MLUs", preset)
		}
	case RDMA:
		if len(layout.RDMADevices()) == 0 {
			return nil, fmt.Errorf("hardware preset %s has no RDMA NICs", preset)
		}
		m.Links = linkmock.New(layout)
		if err := m.keepLinkState(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown vendor %q", vendor)
	}
	bootID := uuid.NewSHA1(uuid.NameSpaceOID, []byte("simulated/"+node)).String()
	if err := hardware.WriteNode(root, layout, bootID); err != nil {
		return nil, fmt.Errorf("simulated machine %s: %w", preset, err)
	}
	if err := hardware.WriteDeviceNodes(root, layout); err != nil {
		return nil, fmt.Errorf("simulated machine %s: %w", preset, err)
	}
	if err := os.WriteFile(filepath.Join(root, bootIDFile), []byte(hostBootID+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := m.openTools(vendor); err != nil {
		return nil, err
	}
	for _, p := range standIns[vendor] {
		path := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(path, 0o755); err != nil {
				return nil, err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, nil, 0o755); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Path is a path below the machine's root.
func (m *Machine) Path(rel string) string { return filepath.Join(m.Root, rel) }

// SysfsRoot, ProcRoot and DevRoot are what the plugin reads instead of
// /sys, /proc and /.
func (m *Machine) SysfsRoot() string { return filepath.Join(m.Root, hardware.SysDir) }

// ProcRoot is the machine's procfs (device majors, MIG minors).
func (m *Machine) ProcRoot() string { return filepath.Join(m.Root, hardware.ProcDir) }

// DevRoot prefixes the machine's device node paths.
func (m *Machine) DevRoot() string { return m.Root }

// realDevices are paths, relative to the host's root, whose presence
// shows the vendor's real devices or driver.
var realDevices = map[Vendor][]string{
	NVIDIA:    {"dev/nvidiactl", "dev/nvidia0", "proc/driver/nvidia/version"},
	Ascend:    {"dev/davinci_manager", "dev/davinci0"},
	Cambricon: {"dev/cambricon_ctl", "dev/cambricon_dev0"},
	RDMA:      {"sys/class/infiniband/*"},
}

// RefuseRealHardware returns an error naming what it found when the host
// (its root folder, "/" on a node) has the vendor's real devices: a
// simulated machine must never hide or stand beside real ones.
func RefuseRealHardware(host string, vendor Vendor) error {
	var found []string
	for _, p := range realDevices[vendor] {
		matches, _ := filepath.Glob(filepath.Join(host, p))
		found = append(found, matches...)
	}
	if len(found) == 0 {
		return nil
	}
	return errors.New("--simulate: this node has real " + string(vendor) + " devices (" + strings.Join(found, ", ") +
		"); refusing to publish simulated ones beside them: remove the simulate setting for this node")
}

// openTools makes the vendor tool's fake and replays its state.
func (m *Machine) openTools(vendor Vendor) error {
	ctx := context.Background()
	switch vendor {
	case Ascend:
		smi, err := npusmimock.New(m.Layout.NPUModel, len(m.Layout.NPUs()))
		if err != nil {
			return err
		}
		// vNPUs are created and destroyed with "npu-smi set".
		m.NPUSMI, err = persist.Open(ctx, m.Path(npusmiState), smi, func(args []string) bool { return len(args) > 0 && args[0] == "set" })
		return err
	case Cambricon:
		c, err := cnmonmock.New(len(m.Layout.MLUs()))
		if err != nil {
			return err
		}
		c.PublishCapabilityNodes(m.DevCharDir(), hardware.CambriconCapMajor)
		// sMLU mode is switched with "cnmon set", instances made and
		// removed with "cnmon smlu".
		m.CNMON, err = persist.Open(ctx, m.Path(cnmonState), c, func(args []string) bool {
			return len(args) > 0 && (args[0] == "set" || args[0] == "smlu")
		})
		return err
	}
	return nil
}

// DevCharDir is the machine's /sys/dev/char, where sMLU capability nodes
// are listed.
func (m *Machine) DevCharDir() string { return m.Path(filepath.Join(hardware.SysDir, "dev", "char")) }

// ForPlugin is a plugin's --simulate: it refuses a host with the vendor's
// real devices, then opens the simulated machine of preset in the
// plugin's data folder, keyed by the host's boot id (read from
// bootIDPath).
func ForPlugin(pluginDataDir, preset, node, bootIDPath string, vendor Vendor) (*Machine, error) {
	if err := RefuseRealHardware("/", vendor); err != nil {
		return nil, err
	}
	bootID, _ := os.ReadFile(bootIDPath)
	m, err := New(filepath.Join(pluginDataDir, "simulated"), preset, node, vendor, strings.TrimSpace(string(bootID)))
	if err != nil {
		return nil, fmt.Errorf("--simulate: %w", err)
	}
	return m, nil
}

// nvmlState and linkState are the files of the GPUs' state
// (nvmlmock.State) and the NICs' (linkmock.Snapshot).
const (
	nvmlState = "nvml.json"
	linkState = "links.json"
)

// keepLinkState restores the VF settings and MTUs a previous plugin left
// and saves them after every change.
func (m *Machine) keepLinkState() error {
	var st linkmock.Snapshot
	if ok, err := readState(m.Path(linkState), &st); err != nil {
		return err
	} else if ok {
		m.Links.Restore(st)
	} else {
		saveState(m.Path(linkState), m.Links.Snapshot())
	}
	m.Links.OnChange(func(st linkmock.Snapshot) { saveState(m.Path(linkState), st) })
	return nil
}

// readState reads a state file; false if there is none.
func readState(path string, v any) (bool, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// saveState writes a state file whole (write and rename). A failure is
// said loudly: a plugin restarted after it would find the devices as
// they were before the change.
func saveState(path string, v any) {
	raw, err := json.Marshal(v)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		tmp := path + ".tmp"
		if err = os.WriteFile(tmp, raw, 0o644); err == nil {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "simulated machine: cannot save device state to %s: %v\n", path, err)
	}
}

// keepNVMLState restores the GPUs' state a previous plugin left and saves
// it after every change, as the GPUs themselves would keep it.
func (m *Machine) keepNVMLState() error {
	var st nvmlmock.State
	if ok, err := readState(m.Path(nvmlState), &st); err != nil {
		return err
	} else if ok {
		m.NVML.Restore(st)
	} else {
		saveState(m.Path(nvmlState), m.NVML.State())
	}
	m.NVML.OnChange(func(st nvmlmock.State) { saveState(m.Path(nvmlState), st) })
	return nil
}
