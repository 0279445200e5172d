package hardware

import "fmt"

// KindNPU is a Huawei Ascend NPU chip.
const KindNPU Kind = "npu"

// Ascend character device majors written to proc/devices. The driver
// gets them dynamically; these are values seen on real hosts.
const (
	AscendDavinciMajor = 236
	AscendManagerMajor = 237
	AscendSVMMajor     = 238
	AscendHDCMajor     = 239
)

// vendorHuawei is the PCI vendor id of Ascend chips.
const vendorHuawei = "0x19e5"

// NPUs returns the machine's Ascend NPUs in npu-smi card order.
func (m Machine) NPUs() []PCIFunction { return m.ofKind(KindNPU) }

// AtlasA2 is a Huawei Atlas 800T A2 training server: eight Ascend 910B3
// (64 GB HBM) fully meshed by HCCS, on four Kunpeng 920 sockets. The PCI
// addresses are those npu-smi prints on the real server, in its card
// order (C1, C2, 81, 82, 01, 02, 41, 42).
func AtlasA2() Machine {
	return atlas("huawei-atlas-800t-a2", "910B3",
		[]int{0xc1, 0xc2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42})
}

// Atlas800 is a Huawei Atlas 800 training server (model 9000): eight
// Ascend 910A (32 GB HBM) in two HCCS rings of four, on four Kunpeng 920
// sockets; npu-smi numbers the cards C1, 81, 41, 01, C2, 82, 42, 02.
func Atlas800() Machine {
	return atlas("huawei-atlas-800", "910A",
		[]int{0xc1, 0x81, 0x41, 0x01, 0xc2, 0x82, 0x42, 0x02})
}

// atlas lays the NPUs out as Kunpeng 920 hosts do: each NPU directly on a
// root port of its socket's root complex (pci0000:00, :40, :80, :c0), no
// PCIe switch; the NUMA node is the socket's first (0, 2, 4, 6: two dies
// per socket).
func atlas(name, model string, buses []int) Machine {
	m := Machine{Name: name, NPUModel: model}
	for i, bus := range buses {
		rootBus := bus &^ 0x3f
		port := bdf(rootBus, (bus-rootBus-1)*8, 0)
		path := []string{fmt.Sprintf("pci0000:%02x", rootBus), port, bdf(bus, 0, 0)}
		m.Functions = append(m.Functions, PCIFunction{Kind: KindNPU, Index: i, Path: path, NUMANode: 2 * (rootBus >> 6)})
	}
	return m
}
