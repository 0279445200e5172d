package hardware

import (
	"fmt"
	"strings"
)

// The GPU node models of Alibaba's openb trace (cluster-trace-gpu-v2023,
// the traces of "Beware of Fragmentation", USENIX ATC'23). The node list
// names a GPU model and a GPU count per node and nothing of the PCI
// layout, so the layouts below are plausible rather than measured: what
// a replay needs from them is the model and the count, and topology
// attributes that look like a real server's. CPU and memory of a node
// come from the node list itself. docs/openb-presets.md gives the GPU
// models and where their values come from.

// openBModel is one GPU model of the trace's node list.
type openBModel struct {
	// trace is the model as the node list's model column writes it.
	trace string
	// gpuModel is the nvmlmock GPU model.
	gpuModel string
	// counts are the GPUs per node the node list has for the model.
	counts []int
}

// openBModels lists the node list's (model, GPUs per node) shapes.
var openBModels = []openBModel{
	{trace: "G2", gpuModel: "Alibaba-G2", counts: []int{8}},
	{trace: "G3", gpuModel: "Alibaba-G3", counts: []int{8}},
	{trace: "T4", gpuModel: "T4-PCIE-16GB", counts: []int{2, 4}},
	{trace: "P100", gpuModel: "P100-PCIE-16GB", counts: []int{1, 2}},
	{trace: "V100M16", gpuModel: "V100-SXM2-16GB", counts: []int{1, 4, 8}},
	{trace: "V100M32", gpuModel: "V100-SXM2-32GB", counts: []int{4, 8}},
	{trace: "A10", gpuModel: "A10-PCIE-24GB", counts: []int{1}},
}

// openBStacks are the PCIe root complexes of a two-socket Xeon Scalable
// host that have x16 slots: the CPU's integrated I/O stacks other than
// the first of each socket, which carries the chipset link. GPUs use them
// in order, the first half of a node's GPUs on socket 0.
var openBStacks = [2][]int{{0x17, 0x3a, 0x5d}, {0x85, 0xae, 0xd7}}

// OpenBMachines returns one layout per (model, GPUs per node) shape of the
// openb node list, named openb-<model>-x<GPUs> (openb-g2-x8,
// openb-v100m16-x4), in the order of openBModels.
func OpenBMachines() []Machine {
	var out []Machine
	for _, model := range openBModels {
		for _, n := range model.counts {
			out = append(out, openBMachine(model, n))
		}
	}
	return out
}

// OpenBPreset returns the preset name of a node of the openb node list
// from its model and gpu columns ("V100M16", 4 → "openb-v100m16-x4"), and
// false for a shape the node list does not have.
func OpenBPreset(model string, gpus int) (string, bool) {
	for _, m := range openBModels {
		if m.trace != model {
			continue
		}
		for _, n := range m.counts {
			if n == gpus {
				return openBName(model, gpus), true
			}
		}
	}
	return "", false
}

func openBName(model string, gpus int) string {
	return fmt.Sprintf("openb-%s-x%d", strings.ToLower(model), gpus)
}

// openBMachine lays out n GPUs of a model. Eight GPUs sit in pairs behind
// four PCIe switches, two switches per socket, as on 8-GPU servers (a
// two-socket host has too few x16 lanes for eight GPUs of its own); fewer
// sit each on a root port of its own. GPU 0 to n/2-1 are on NUMA node 0,
// the rest on node 1; a single GPU is on node 0.
func openBMachine(model openBModel, n int) Machine {
	m := Machine{Name: openBName(model.trace, n), GPUModel: model.gpuModel}
	perSocket := max(n/2, 1)
	if n == 8 {
		for pair := 0; pair < n/2; pair++ {
			socket := pair / 2
			m.Functions = append(m.Functions, switchedGPUs(2*pair, openBStacks[socket][pair%2], socket)...)
		}
		return m
	}
	for i := 0; i < n; i++ {
		socket := i / perSocket
		m.Functions = append(m.Functions, rootPortGPU(i, openBStacks[socket][i%perSocket], socket))
	}
	return m
}

// rootPortGPU is a GPU directly below a root port of its own root complex:
//
//	pciDDDD:RR / RR:00.0 / (RR+1):00.0
func rootPortGPU(idx, root, numa int) PCIFunction {
	path := []string{fmt.Sprintf("pci0000:%02x", root), bdf(root, 0, 0), bdf(root+1, 0, 0)}
	return PCIFunction{Kind: KindGPU, Index: idx, Path: path, NUMANode: numa}
}

// switchedGPUs is a pair of GPUs, first and first+1, behind one PCIe
// switch on a root port:
//
//	pciDDDD:RR / RR:00.0 / (RR+1):00.0 / (RR+2):08.0 / (RR+3):00.0
//	                                   \ (RR+2):10.0 / (RR+4):00.0
func switchedGPUs(first, root, numa int) []PCIFunction {
	base := []string{fmt.Sprintf("pci0000:%02x", root), bdf(root, 0, 0), bdf(root+1, 0, 0)}
	out := make([]PCIFunction, 0, 2)
	for j := 0; j < 2; j++ {
		path := append(append([]string{}, base...), bdf(root+2, 8*(j+1), 0), bdf(root+3+j, 0, 0))
		out = append(out, PCIFunction{Kind: KindGPU, Index: first + j, Path: path, NUMANode: numa})
	}
	return out
}
