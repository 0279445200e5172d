package hardware

import "fmt"

// KindMLU is a Cambricon MLU chip (one cnmon card).
const KindMLU Kind = "mlu"

// Cambricon character device majors written to proc/devices. The driver
// allocates every region dynamically; these are plausible values.
const (
	CambriconCtlMajor  = 240
	CambriconDevMajor  = 241
	CambriconIPCMMajor = 242
	CambriconCapMajor  = 243
)

// vendorCambricon is the PCI vendor id of Cambricon chips.
const vendorCambricon = "0xcabc"

// MLUs returns the machine's Cambricon MLU chips in cnmon card order.
func (m Machine) MLUs() []PCIFunction { return m.ofKind(KindMLU) }

// mlu370X8Boards places the eight MLU370-X8 boards of a server: the bus
// of each board's two chips (cnmon prints them as two cards). 13/16 and
// 39/3D are real boards; the others follow the same pattern.
var mlu370X8Boards = [8][2]int{
	{0x13, 0x16}, {0x39, 0x3d}, {0x4f, 0x53}, {0x6f, 0x73},
	{0x94, 0x98}, {0xb8, 0xbc}, {0xce, 0xd2}, {0xee, 0xf2},
}

// MLU370X8 is an eight-board MLU370-X8 training server: sixteen MLU370
// chips (cnmon cards 0-15), two per board behind the board's own PCIe
// switch, boards 0-3 on the first socket and 4-7 on the second. Each
// board sits on a root port of its own root complex, three buses below
// the chips (root port, switch upstream port, switch internal bus).
func MLU370X8() Machine {
	m := Machine{Name: "cambricon-mlu370-x8", MLUModel: "MLU370-X8"}
	for b, chips := range mlu370X8Boards {
		root := chips[0] - 3
		numa := 0
		if root >= 0x80 {
			numa = 1
		}
		up := bdf(root+1, 0, 0)
		for j, bus := range chips {
			down := bdf(root+2, 4*j, 0)
			path := []string{fmt.Sprintf("pci0000:%02x", root), bdf(root, 1, 0), up, down, bdf(bus, 0, 0)}
			m.Functions = append(m.Functions, PCIFunction{Kind: KindMLU, Index: 2*b + j, Path: path, NUMANode: numa})
		}
	}
	return m
}
