package hardware

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Link layers an RDMA port reports in sysfs.
const (
	LinkInfiniBand = "InfiniBand"
	LinkEthernet   = "Ethernet"
)

// Character device numbers of the RDMA subsystem as the kernel registers
// them: uverbsN is 231:192+N, umadN 231:N, issmN 231:64+N; rdma_cm is a
// misc device whose minor is dynamic (58 on current kernels).
const (
	InfiniBandMajor = 231
	UverbsBase      = 192
	IssmBase        = 64
	MiscMajor       = 10
	RDMACMMinor     = 58
)

// NIC describes an RDMA NIC model as the mlx5 driver shows it in sysfs.
type NIC struct {
	// Model is the marketing name, e.g. ConnectX-7.
	Model string
	// DeviceID and VFDeviceID are the PCI device ids of the physical and
	// virtual functions.
	DeviceID, VFDeviceID string
	// LinkLayer is InfiniBand or Ethernet (RoCE).
	LinkLayer string
	// RateGbps is the port's active rate; Width and Speed are how the
	// kernel spells it ("4X", "NDR").
	RateGbps     int
	Width, Speed string
	// TotalVFs is sriov_totalvfs; NumVFs is sriov_numvfs, the virtual
	// functions an operator (or the SR-IOV network operator) enabled.
	TotalVFs, NumVFs int
}

// ConnectX-7 and ConnectX-6 as DGX systems ship them: single-port NDR and
// HDR InfiniBand adapters with SR-IOV enabled (four VFs per port, as an
// SR-IOV network operator policy configures them), and a 400GbE RoCE
// ConnectX-7 for Ethernet fabrics.
var (
	ConnectX7IB = NIC{Model: "ConnectX-7", DeviceID: "0x1021", VFDeviceID: "0x101e", LinkLayer: LinkInfiniBand,
		RateGbps: 400, Width: "4X", Speed: "NDR", TotalVFs: 16, NumVFs: 4}
	ConnectX6IB = NIC{Model: "ConnectX-6", DeviceID: "0x101b", VFDeviceID: "0x101c", LinkLayer: LinkInfiniBand,
		RateGbps: 200, Width: "4X", Speed: "HDR", TotalVFs: 16, NumVFs: 4}
	ConnectX7RoCE = NIC{Model: "ConnectX-7", DeviceID: "0x1021", VFDeviceID: "0x101e", LinkLayer: LinkEthernet,
		RateGbps: 400, Width: "4X", Speed: "NDR", TotalVFs: 16, NumVFs: 4}
)

// RDMADevice is one RDMA device of a machine's fake tree: a NIC's
// physical function or one of its virtual functions.
type RDMADevice struct {
	// Name is the RDMA device name (mlx5_N); N is also its uverbs and umad
	// number.
	Name   string
	Number int
	NetDev string
	BusID  string
	// PF is the physical function's bus id for a VF, "" for a PF.
	PF      string
	VFIndex int
	NIC     NIC
	// NUMANode and Path are those of the PCI function.
	NUMANode int
	Path     []string
}

// RDMADevices lists the machine's RDMA devices: the NICs' physical
// functions, then every enabled virtual function, numbered after the
// highest physical function as the mlx5 driver registers them.
func (m Machine) RDMADevices() []RDMADevice {
	var pfs []RDMADevice
	next := 0
	for _, f := range m.NICs() {
		n := rdmaNumber(f.RDMADev)
		pfs = append(pfs, RDMADevice{Name: f.RDMADev, Number: n, NetDev: f.NetDev, BusID: f.BusID(), NIC: f.nic(), NUMANode: f.NUMANode, Path: f.Path})
		if n >= next {
			next = n + 1
		}
	}
	out := append([]RDMADevice(nil), pfs...)
	for _, pf := range pfs {
		for k := 0; k < pf.NIC.NumVFs; k++ {
			path := append(append([]string(nil), pf.Path[:len(pf.Path)-1]...), vfBusID(pf.BusID, k))
			out = append(out, RDMADevice{
				Name: fmt.Sprintf("mlx5_%d", next), Number: next, NetDev: fmt.Sprintf("%sv%d", pf.NetDev, k),
				BusID: path[len(path)-1], PF: pf.BusID, VFIndex: k, NIC: pf.NIC, NUMANode: pf.NUMANode, Path: path,
			})
			next++
		}
	}
	return out
}

func (f PCIFunction) nic() NIC {
	if f.NIC != nil {
		return *f.NIC
	}
	return ConnectX7IB
}

func rdmaNumber(name string) int {
	i := strings.LastIndexByte(name, '_')
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return 0
	}
	return n
}

// vfBusID is the address of a PF's k-th VF: offset 1, stride 1 on the
// PF's bus, as single-port ConnectX adapters lay them out.
func vfBusID(pf string, k int) string {
	var domain, bus, dev, fn int
	fmt.Sscanf(pf, "%04x:%02x:%02x.%x", &domain, &bus, &dev, &fn)
	devfn := dev*8 + fn + 1 + k
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, devfn/8, devfn%8)
}

// guid is a NIC's node GUID, derived from its RDMA device number under
// NVIDIA's OUI (b8:3f:d2).
func guid(n int) string { return fmt.Sprintf("b83f:d203:00a1:%04x", n) }

func mac(n int) string { return fmt.Sprintf("b8:3f:d2:a1:%02x:%02x", n>>8, n&0xff) }

// writeRDMA renders the RDMA side of the machine's NICs: for each PF and
// VF the net/ and infiniband/ directories below the PCI function (port
// state, rate, link layer, GUID, address), the uverbs and umad class
// devices, the SR-IOV files and physfn/virtfn links, the class/
// symlinks, and the rdma_cm misc device.
func writeRDMA(sys string, m Machine) error {
	devs := m.RDMADevices()
	if len(devs) == 0 {
		return nil
	}
	busDir := filepath.Join(sys, "bus", "pci", "devices")
	for _, d := range devs {
		dir := filepath.Join(append([]string{sys, "devices"}, d.Path...)...)
		files := map[string]string{
			"vendor":    vendorMellanox,
			"numa_node": strconv.Itoa(d.NUMANode),
			"class":     "0x020700",
		}
		if d.NIC.LinkLayer == LinkEthernet {
			files["class"] = "0x020000"
		}
		if d.PF == "" {
			files["device"] = d.NIC.DeviceID
			files["sriov_totalvfs"] = strconv.Itoa(d.NIC.TotalVFs)
			files["sriov_numvfs"] = strconv.Itoa(d.NIC.NumVFs)
		} else {
			files["device"] = d.NIC.VFDeviceID
		}
		ib := filepath.Join("infiniband", d.Name)
		port := filepath.Join(ib, "ports", "1")
		files[filepath.Join(ib, "node_guid")] = guid(d.Number)
		files[filepath.Join(ib, "node_type")] = "1: CA"
		files[filepath.Join(port, "state")] = "4: ACTIVE"
		files[filepath.Join(port, "phys_state")] = "5: LinkUp"
		files[filepath.Join(port, "rate")] = fmt.Sprintf("%d Gb/sec (%s %s)", d.NIC.RateGbps, d.NIC.Width, d.NIC.Speed)
		files[filepath.Join(port, "link_layer")] = d.NIC.LinkLayer
		verbs := filepath.Join("infiniband_verbs", fmt.Sprintf("uverbs%d", d.Number))
		files[filepath.Join(verbs, "ibdev")] = d.Name
		files[filepath.Join(verbs, "dev")] = fmt.Sprintf("%d:%d", InfiniBandMajor, UverbsBase+d.Number)
		netdir := filepath.Join("net", d.NetDev)
		files[filepath.Join(netdir, "mtu")] = "4092"
		files[filepath.Join(netdir, "operstate")] = "up"
		// IPoIB hardware address: QP number and flags, then the port GID
		// (link-local prefix and the port GUID).
		files[filepath.Join(netdir, "address")] = "00:00:10:87:fe:80:00:00:00:00:00:00:" + colonPairs(strings.ReplaceAll(guid(d.Number), ":", ""))
		files[filepath.Join(netdir, "type")] = "32"
		if d.NIC.LinkLayer == LinkEthernet {
			// Jumbo frames on the PF, the kernel's default on a VF.
			files[filepath.Join(netdir, "mtu")] = "1500"
			if d.PF == "" {
				files[filepath.Join(netdir, "mtu")] = "9000"
			}
			files[filepath.Join(netdir, "address")] = mac(d.Number)
			files[filepath.Join(netdir, "type")] = "1"
		} else {
			mad := filepath.Join("infiniband_mad", fmt.Sprintf("umad%d", d.Number))
			files[filepath.Join(mad, "ibdev")] = d.Name
			files[filepath.Join(mad, "port")] = "1"
			files[filepath.Join(mad, "dev")] = fmt.Sprintf("%d:%d", InfiniBandMajor, d.Number)
		}
		for name, content := range files {
			if err := writeFile(filepath.Join(dir, name), content+"\n"); err != nil {
				return err
			}
		}
		if d.PF != "" {
			if err := os.Symlink(filepath.Join("..", d.PF), filepath.Join(dir, "physfn")); err != nil && !os.IsExist(err) {
				return err
			}
			pfDir := filepath.Join(filepath.Dir(dir), d.PF)
			if err := os.Symlink(filepath.Join("..", d.BusID), filepath.Join(pfDir, fmt.Sprintf("virtfn%d", d.VFIndex))); err != nil && !os.IsExist(err) {
				return err
			}
			target := filepath.Join(append([]string{"..", "..", "..", "devices"}, d.Path...)...)
			if err := os.Symlink(target, filepath.Join(busDir, d.BusID)); err != nil && !os.IsExist(err) {
				return err
			}
		}
		// class/<class>/<name> -> ../../devices/<path>/<class>/<name>
		for class, name := range map[string]string{"infiniband": d.Name, "net": d.NetDev, "infiniband_verbs": fmt.Sprintf("uverbs%d", d.Number)} {
			classDir := filepath.Join(sys, "class", class)
			if err := os.MkdirAll(classDir, 0o755); err != nil {
				return err
			}
			target := filepath.Join(append(append([]string{"..", "..", "devices"}, d.Path...), class, name)...)
			if err := os.Symlink(target, filepath.Join(classDir, name)); err != nil && !os.IsExist(err) {
				return err
			}
		}
	}
	if err := writeFile(filepath.Join(sys, "devices", "virtual", "misc", "rdma_cm", "dev"), fmt.Sprintf("%d:%d\n", MiscMajor, RDMACMMinor)); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(sys, "class", "misc"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink(filepath.Join("..", "..", "devices", "virtual", "misc", "rdma_cm"), filepath.Join(sys, "class", "misc", "rdma_cm")); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}

// colonPairs writes hex digits as colon-separated bytes.
func colonPairs(hex string) string {
	var parts []string
	for i := 0; i+1 < len(hex); i += 2 {
		parts = append(parts, hex[i:i+2])
	}
	return strings.Join(parts, ":")
}
