// Package hardware describes the PCI layout of real accelerator servers and
// renders it as a fake sysfs tree, so that drivers read topology exactly the
// way they do on a node (symlinks under bus/pci/devices, numa_node files)
// while tests and the simulator run without hardware.
//
// The layouts follow the vendors' published system guides: PCI addresses of
// GPUs and NICs, which GPU shares a PCIe switch with which NIC, and the NUMA
// node of each.
package hardware

import (
	"fmt"
	"strings"
)

// Kind is the class of a PCI function in a layout.
type Kind string

// Kinds of PCI functions a layout can hold.
const (
	KindGPU Kind = "gpu"
	KindNIC Kind = "nic"
)

// PCIFunction is one endpoint in the PCI tree.
type PCIFunction struct {
	Kind Kind
	// Index is the vendor's enumeration index among functions of this kind.
	Index int
	// Path lists the sysfs path below /sys/devices: the root complex
	// ("pci0000:15") followed by every bridge down to the function itself.
	Path []string
	// NUMANode is the node the root complex belongs to.
	NUMANode int
	// NetDev and RDMADev are the interface and RDMA device names of a NIC.
	NetDev  string
	RDMADev string
	// NIC is the adapter model of a NIC (ConnectX-7 InfiniBand if nil).
	NIC *NIC
}

// BusID returns the function's PCI address in extended BDF form.
func (f PCIFunction) BusID() string { return f.Path[len(f.Path)-1] }

// Root returns the PCIe root complex, "pci<domain>:<bus>".
func (f PCIFunction) Root() string { return f.Path[0] }

// Machine is the layout of one server model.
type Machine struct {
	// Name is the preset name used in cluster files, e.g. nvidia-dgx-h100.
	Name string
	// GPUModel names the GPU configuration (see package nvmlmock).
	GPUModel string
	// NPUModel names the Ascend chip (see package npusmimock).
	NPUModel string
	// MLUModel names the Cambricon board (see package cnmonmock).
	MLUModel  string
	Functions []PCIFunction
	// NVLinkPartitions are the GPU groups (by GPU index) that the NVSwitch
	// fabric manager offers as partitions with full NVLink bandwidth.
	NVLinkPartitions [][]int
}

// GPUs returns the machine's GPUs in index order.
func (m Machine) GPUs() []PCIFunction { return m.ofKind(KindGPU) }

// NICs returns the machine's RDMA NICs in index order.
func (m Machine) NICs() []PCIFunction { return m.ofKind(KindNIC) }

func (m Machine) ofKind(k Kind) []PCIFunction {
	var out []PCIFunction
	for _, f := range m.Functions {
		if f.Kind == k {
			out = append(out, f)
		}
	}
	return out
}

// Machines returns every known layout by preset name.
func Machines() map[string]Machine {
	all := map[string]Machine{
		DGXH100().Name:        DGXH100(),
		DGXA100().Name:        DGXA100(),
		HGXH200().Name:        HGXH200(),
		HGXH100CPUNICs().Name: HGXH100CPUNICs(),
		AtlasA2().Name:        AtlasA2(),
		Atlas800().Name:       Atlas800(),
		MLU370X8().Name:       MLU370X8(),
	}
	for _, m := range OpenBMachines() {
		all[m.Name] = m
	}
	return all
}

// Lookup returns the layout of a preset or an error that lists the known ones.
func Lookup(name string) (Machine, error) {
	all := Machines()
	if m, ok := all[name]; ok {
		return m, nil
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	return Machine{}, fmt.Errorf("unknown hardware preset %q (known: %s)", name, strings.Join(sortedStrings(names), ", "))
}

// bdf formats a PCI address in domain 0.
func bdf(bus, dev, fn int) string { return fmt.Sprintf("0000:%02x:%02x.%x", bus, dev, fn) }

// switchedPair builds a GPU and its rail NIC below one PCIe switch, the way
// HGX baseboards wire them: root port → switch upstream port → one
// downstream port to the NIC, one to a second-level switch that holds the
// GPU.
//
//	pci0000:RR / RR:01.0 / SS:00.0 / (SS+1):00.0 / NIC
//	                              \ (SS+1):01.0 / G-2:00.0 / G-1:00.0 / GPU
func switchedPair(gpuIdx, root, upstream, nicBus, gpuBus, numa int, netdev, rdma string) []PCIFunction {
	rootPort := bdf(root, 1, 0)
	up := bdf(upstream, 0, 0)
	base := []string{fmt.Sprintf("pci0000:%02x", root), rootPort, up}
	nicPath := append(append([]string{}, base...), bdf(upstream+1, 0, 0), bdf(nicBus, 0, 0))
	gpuPath := append(append([]string{}, base...), bdf(upstream+1, 1, 0), bdf(gpuBus-2, 0, 0), bdf(gpuBus-1, 0, 0), bdf(gpuBus, 0, 0))
	return []PCIFunction{
		{Kind: KindGPU, Index: gpuIdx, Path: gpuPath, NUMANode: numa},
		{Kind: KindNIC, Index: gpuIdx, Path: nicPath, NUMANode: numa, NetDev: netdev, RDMADev: rdma, NIC: &ConnectX7IB},
	}
}

// DGXH100 is an NVIDIA DGX H100: eight H100 SXM5 80GB on an HGX baseboard,
// each sharing a PCIe switch with one ConnectX-7 compute NIC, GPUs 0-3 on
// NUMA node 0 and 4-7 on node 1 (addresses from the DGX H100 user guide).
func DGXH100() Machine {
	return hgx8("nvidia-dgx-h100", "H100-SXM5-80GB")
}

// HGXH200 is an HGX H200 8-GPU server with the DGX H100 PCI layout.
func HGXH200() Machine {
	return hgx8("nvidia-hgx-h200", "H200-SXM5-141GB")
}

func hgx8(name, model string) Machine {
	type rail struct {
		gpuBus, nicBus int
		numa           int
		netdev, rdma   string
	}
	rails := []rail{
		{0x1b, 0x18, 0, "ibp24s0", "mlx5_0"},
		{0x43, 0x40, 0, "ibp64s0", "mlx5_3"},
		{0x52, 0x4f, 0, "ibp79s0", "mlx5_4"},
		{0x61, 0x5e, 0, "ibp94s0", "mlx5_5"},
		{0x9d, 0x9a, 1, "ibp154s0", "mlx5_6"},
		{0xc3, 0xc0, 1, "ibp192s0", "mlx5_9"},
		{0xd1, 0xce, 1, "ibp206s0", "mlx5_10"},
		{0xdf, 0xdc, 1, "ibp220s0", "mlx5_11"},
	}
	m := Machine{Name: name, GPUModel: model, NVLinkPartitions: sharedNVSwitchPartitions8()}
	for i, r := range rails {
		root := r.nicBus - 3
		m.Functions = append(m.Functions, switchedPair(i, root, root+1, r.nicBus, r.gpuBus, r.numa, r.netdev, r.rdma)...)
	}
	return m
}

// DGXA100 is an NVIDIA DGX A100 (A100 SXM4 40GB): GPUs in pairs behind one
// PCIe switch with two ConnectX-6 NICs, on an AMD EPYC host in NPS4 mode, so
// each pair sits on its own NUMA node (3, 1, 7, 5 for pairs 0-3).
func DGXA100() Machine {
	type pair struct {
		root         int
		gpuBus       [2]int
		nicBus       [2]int
		numa         int
		netdev, rdma [2]string
	}
	pairs := []pair{
		{0x00, [2]int{0x07, 0x0f}, [2]int{0x0c, 0x12}, 3, [2]string{"ibp12s0", "ibp18s0"}, [2]string{"mlx5_0", "mlx5_1"}},
		{0x40, [2]int{0x47, 0x4e}, [2]int{0x4b, 0x54}, 1, [2]string{"ibp75s0", "ibp84s0"}, [2]string{"mlx5_2", "mlx5_3"}},
		{0x80, [2]int{0x87, 0x90}, [2]int{0x8d, 0x94}, 7, [2]string{"ibp141s0", "ibp148s0"}, [2]string{"mlx5_6", "mlx5_7"}},
		{0xb0, [2]int{0xb7, 0xbd}, [2]int{0xba, 0xc1}, 5, [2]string{"ibp186s0", "ibp193s0"}, [2]string{"mlx5_8", "mlx5_9"}},
	}
	m := Machine{Name: "nvidia-dgx-a100", GPUModel: "A100-SXM4-40GB", NVLinkPartitions: sharedNVSwitchPartitions8()}
	for p, pr := range pairs {
		rootName := fmt.Sprintf("pci0000:%02x", pr.root)
		rootPort := bdf(pr.root, 1, 1)
		up := bdf(pr.root+1, 0, 0)
		for j := 0; j < 2; j++ {
			down := bdf(pr.root+2, j*4, 0)
			gpu := []string{rootName, rootPort, up, down, bdf(pr.gpuBus[j], 0, 0)}
			nic := []string{rootName, rootPort, up, bdf(pr.root+2, j*4+1, 0), bdf(pr.nicBus[j], 0, 0)}
			m.Functions = append(m.Functions,
				PCIFunction{Kind: KindGPU, Index: 2*p + j, Path: gpu, NUMANode: pr.numa},
				PCIFunction{Kind: KindNIC, Index: 2*p + j, Path: nic, NUMANode: pr.numa, NetDev: pr.netdev[j], RDMADev: pr.rdma[j], NIC: &ConnectX6IB},
			)
		}
	}
	return m
}

// HGXH100CPUNICs is an 8-GPU HGX H100 server whose RDMA NICs sit in the
// CPUs' own PCIe slots rather than beside the GPUs: the GPUs in pairs
// behind four PCIe switches (two per socket), four 400GbE RoCE ConnectX-7
// adapters each on a root port of its own. No NIC shares a root complex
// or a switch with a GPU, only NUMA nodes (0 and 1).
func HGXH100CPUNICs() Machine {
	m := Machine{Name: "nvidia-hgx-h100-cpu-nics", GPUModel: "H100-SXM5-80GB", NVLinkPartitions: sharedNVSwitchPartitions8()}
	gpuRoots := []struct{ root, numa int }{{0x15, 0}, {0x37, 0}, {0x9a, 1}, {0xba, 1}}
	for p, g := range gpuRoots {
		rootName := fmt.Sprintf("pci0000:%02x", g.root)
		up := bdf(g.root+1, 0, 0)
		for j := 0; j < 2; j++ {
			down := bdf(g.root+2, j, 0)
			gpu := []string{rootName, bdf(g.root, 1, 0), up, down, bdf(g.root+3+j, 0, 0)}
			m.Functions = append(m.Functions, PCIFunction{Kind: KindGPU, Index: 2*p + j, Path: gpu, NUMANode: g.numa})
		}
	}
	nicRoots := []struct{ root, numa int }{{0x28, 0}, {0x4a, 0}, {0xab, 1}, {0xcb, 1}}
	for i, r := range nicRoots {
		bus := r.root + 1
		path := []string{fmt.Sprintf("pci0000:%02x", r.root), bdf(r.root, 1, 0), bdf(bus, 0, 0)}
		m.Functions = append(m.Functions, PCIFunction{Kind: KindNIC, Index: i, Path: path, NUMANode: r.numa,
			NetDev: fmt.Sprintf("enp%ds0np0", bus), RDMADev: fmt.Sprintf("mlx5_%d", i), NIC: &ConnectX7RoCE})
	}
	return m
}

// sharedNVSwitchPartitions8 is the fabric manager's default partition
// table of an 8-GPU NVSwitch baseboard (HGX A100/H100): one partition of
// all eight GPUs, two of four, four of two and eight of one.
func sharedNVSwitchPartitions8() [][]int {
	parts := [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}}
	for i := 0; i < 8; i++ {
		parts = append(parts, []int{i})
	}
	return parts
}
