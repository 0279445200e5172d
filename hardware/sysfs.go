package hardware

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Node-root layout written by WriteNode. Drivers are pointed at these
// directories instead of / so a simulated node looks like a real one.
const (
	SysDir     = "sys"
	ProcDir    = "proc"
	BootIDFile = "proc/sys/kernel/random/boot_id"
	// FabricPartitionsFile holds the fabric manager's partition list as
	// "fmpm -l" prints it.
	FabricPartitionsFile = "fabricmanager/partitions.json"
	// MIGMinorsFile is the driver's table of MIG capability device minors.
	MIGMinorsFile = "proc/driver/nvidia-caps/mig-minors"
)

// NVIDIA character device majors as the driver registers them: 195 is
// fixed, nvidia-uvm gets a dynamic major (511 is what current kernels hand
// out first).
const (
	NvidiaMajor     = 195
	NvidiaUVMMajor  = 511
	NvidiaCapsMajor = 508
)

// PCI vendor ids written to sysfs.
const (
	vendorNVIDIA   = "0x10de"
	vendorMellanox = "0x15b3"
)

// WriteNode renders a machine under root: a sysfs tree (sys/devices with
// the PCI hierarchy, sys/bus/pci/devices symlinks, numa_node, vendor, and
// the RDMA, netdev and SR-IOV files of NICs and their VFs), proc/devices with the
// NVIDIA majors, and a boot id.
func WriteNode(root string, m Machine, bootID string) error {
	if err := WriteMachine(root, m); err != nil {
		return err
	}
	return WriteBootID(root, bootID)
}

// WriteBootID writes a node's boot id under root.
func WriteBootID(root, bootID string) error {
	return writeFile(filepath.Join(root, BootIDFile), bootID+"\n")
}

// WriteMachine renders what is the same on every machine of a layout:
// WriteNode without the boot id. Simulated nodes of one layout read one
// copy.
func WriteMachine(root string, m Machine) error {
	sys := filepath.Join(root, SysDir)
	busDir := filepath.Join(sys, "bus", "pci", "devices")
	if err := os.MkdirAll(busDir, 0o755); err != nil {
		return err
	}
	for _, f := range m.Functions {
		if err := writeFunction(sys, busDir, f); err != nil {
			return fmt.Errorf("%s %d: %w", f.Kind, f.Index, err)
		}
	}
	if err := writeRDMA(sys, m); err != nil {
		return err
	}
	procDevices := fmt.Sprintf("Character devices:\n  1 mem\n  4 tty\n%3d nvidia-frontend\n%3d nvidia-caps\n%3d nvidia-uvm\n",
		NvidiaMajor, NvidiaCapsMajor, NvidiaUVMMajor)
	if len(m.NPUs()) > 0 {
		procDevices += fmt.Sprintf("%3d devdrv-cdev\n%3d hisi_davinci_intf\n%3d devmm_svm\n%3d hisi_hdc\n",
			AscendDavinciMajor, AscendManagerMajor, AscendSVMMajor, AscendHDCMajor)
	}
	if len(m.MLUs()) > 0 {
		procDevices += fmt.Sprintf("%3d cambricon_ctl\n%3d cambricon_dev\n%3d cn_rpmsg\n%3d cambricon_smlu_cap\n",
			CambriconCtlMajor, CambriconDevMajor, CambriconIPCMMajor, CambriconCapMajor)
	}
	if err := writeFile(filepath.Join(root, ProcDir, "devices"), procDevices); err != nil {
		return err
	}
	if len(m.GPUs()) > 0 {
		if err := writeFile(filepath.Join(root, MIGMinorsFile), migMinors(len(m.GPUs()))); err != nil {
			return err
		}
	}
	if len(m.NVLinkPartitions) > 0 {
		if err := writeFabricPartitions(filepath.Join(root, FabricPartitionsFile), m); err != nil {
			return err
		}
	}
	return nil
}

func writeFunction(sys, busDir string, f PCIFunction) error {
	// Every bridge on the way gets a directory and a numa_node, as in a
	// real tree.
	for i := 1; i <= len(f.Path); i++ {
		dir := filepath.Join(append([]string{sys, "devices"}, f.Path[:i]...)...)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if i > 1 {
			if err := writeFile(filepath.Join(dir, "numa_node"), strconv.Itoa(f.NUMANode)+"\n"); err != nil {
				return err
			}
		}
	}
	dev := filepath.Join(append([]string{sys, "devices"}, f.Path...)...)
	vendor := vendorNVIDIA
	switch f.Kind {
	case KindNIC:
		vendor = vendorMellanox
	case KindNPU:
		vendor = vendorHuawei
	case KindMLU:
		vendor = vendorCambricon
	}
	if err := writeFile(filepath.Join(dev, "vendor"), vendor+"\n"); err != nil {
		return err
	}
	// bus/pci/devices/<bdf> -> ../../../devices/<path>, exactly as the
	// kernel links it.
	target := filepath.Join(append([]string{"..", "..", "..", "devices"}, f.Path...)...)
	link := filepath.Join(busDir, f.BusID())
	if err := os.Symlink(target, link); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

func sortedStrings(s []string) []string {
	sort.Strings(s)
	return s
}
