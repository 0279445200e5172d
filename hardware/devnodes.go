package hardware

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DeviceNode is a character device a machine's drivers create under
// /dev, with the numbers the machine's /proc/devices and sysfs give it.
type DeviceNode struct {
	// Path is relative to /dev.
	Path         string
	Major, Minor uint32
}

// DeviceNodes lists the character devices the drivers of a machine create
// at boot: every GPU's, NPU's and MLU's node with its control nodes, the
// MIG capability nodes of the driver's minor table, and the RDMA
// devices' verbs and MAD nodes with rdma_cm. Nodes a driver makes later
// (a vNPU's, an sMLU's) are not listed.
func DeviceNodes(m Machine) []DeviceNode {
	var out []DeviceNode
	if gpus := len(m.GPUs()); gpus > 0 {
		for i := range gpus {
			out = append(out, DeviceNode{fmt.Sprintf("nvidia%d", i), NvidiaMajor, uint32(i)})
		}
		out = append(out,
			DeviceNode{"nvidiactl", NvidiaMajor, 255},
			DeviceNode{"nvidia-uvm", NvidiaUVMMajor, 0},
			DeviceNode{"nvidia-uvm-tools", NvidiaUVMMajor, 1})
		// The minor table's entries run from 1 (config) to the last
		// compute instance of the last GPU.
		last := 2 + gpus*migGPUInstancesPerGPU*(1+migComputeInstancesPerGPU)
		for minor := 1; minor <= last; minor++ {
			out = append(out, DeviceNode{fmt.Sprintf("nvidia-caps/nvidia-cap%d", minor), NvidiaCapsMajor, uint32(minor)})
		}
	}
	if npus := len(m.NPUs()); npus > 0 {
		for i := range npus {
			out = append(out, DeviceNode{fmt.Sprintf("davinci%d", i), AscendDavinciMajor, uint32(i)})
		}
		out = append(out,
			DeviceNode{"davinci_manager", AscendManagerMajor, 0},
			DeviceNode{"devmm_svm", AscendSVMMajor, 0},
			DeviceNode{"hisi_hdc", AscendHDCMajor, 0})
	}
	if mlus := len(m.MLUs()); mlus > 0 {
		out = append(out, DeviceNode{"cambricon_ctl", CambriconCtlMajor, 0})
		for i := range mlus {
			out = append(out,
				DeviceNode{fmt.Sprintf("cambricon_dev%d", i), CambriconDevMajor, uint32(i)},
				DeviceNode{fmt.Sprintf("cambricon_ipcm%d", i), CambriconIPCMMajor, uint32(i)})
		}
	}
	if rdma := m.RDMADevices(); len(rdma) > 0 {
		for _, d := range rdma {
			out = append(out, DeviceNode{fmt.Sprintf("infiniband/uverbs%d", d.Number), InfiniBandMajor, uint32(UverbsBase + d.Number)})
			if d.NIC.LinkLayer != LinkEthernet {
				out = append(out, DeviceNode{fmt.Sprintf("infiniband/umad%d", d.Number), InfiniBandMajor, uint32(d.Number)})
			}
		}
		out = append(out, DeviceNode{"infiniband/rdma_cm", MiscMajor, RDMACMMinor})
	}
	return out
}

// WriteDeviceNodes creates the machine's device nodes under root/dev as
// real character devices (mknod; it needs root), so that a CDI spec that
// names them resolves on the host and a container runtime creates the
// same device, type and numbers, in the container. Nothing backs them:
// opening one fails as for a device whose driver is not loaded.
func WriteDeviceNodes(root string, m Machine) error {
	return MakeDeviceNodes(root, DeviceNodes(m))
}

// MakeDeviceNodes creates nodes under root/dev; existing ones are kept.
func MakeDeviceNodes(root string, nodes []DeviceNode) error {
	for _, d := range nodes {
		p := filepath.Join(root, "dev", d.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.Major, d.Minor))); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
	}
	return nil
}
