package npusmi

import "fmt"

// Chip is one NPU chip of the node.
type Chip struct {
	// Card is npu-smi's "NPU ID" (-i), Chip its "Chip ID" (-c).
	Card, Chip int
	// LogicID is the "Chip Logic ID" the runtime numbers devices by
	// (ASCEND_RT_VISIBLE_DEVICES).
	LogicID int
	// PhyID is the physical chip id where npu-smi prints one (A3's "Chip
	// Phy-ID" column); on 910A/910B servers it is the logic id (see the
	// package documentation).
	PhyID int
	// Name is the chip name as npu-smi prints it: "910B3", "910A".
	Name string
	// BusID is the PCI address in the kernel's form, "0000:c1:00.0"; empty
	// if npu-smi printed none.
	BusID string
	// MemoryMB is the chip's HBM capacity.
	MemoryMB int64
	// AICores is the "Aicore Count" of -t common; 0 if not printed.
	AICores int
}

// ChipError is why npu-smi could not describe a chip that info -m lists.
type ChipError struct {
	// Card and Chip are the chip's "NPU ID" and "Chip ID".
	Card, Chip int
	Err        error
}

// Error names the chip and the cause.
func (e *ChipError) Error() string { return fmt.Sprintf("NPU %d chip %d: %v", e.Card, e.Chip, e.Err) }

// Unwrap returns the cause.
func (e *ChipError) Unwrap() error { return e.Err }

// Template is a vNPU template of npu-smi info -t template-info. Media
// counts the tool does not support print as 0.
type Template struct {
	Name     string
	AICores  int
	MemoryMB int64
	AICPU    int
	VPC      int
	VDEC     int
	JPEGD    int
	PNGD     int
	VENC     int
	JPEGE    int
}

// VNPU is a vNPU of npu-smi info -t info-vnpu.
type VNPU struct {
	// ID is the vNPU id; the host device is /dev/vdavinci<ID>.
	ID       int
	Template string
	// VGroup is the "Vgroup ID", -1 where the tool prints NA (Atlas
	// training products such as the 910A do not report it).
	VGroup int
	// ContainerID is the "Container ID" column, "" for NA.
	ContainerID string
	// InUse is the "Status" column: 1 when a container holds the vNPU.
	InUse bool
}

// VNPUDevicePath is the host character device of a vNPU.
func VNPUDevicePath(id int) string { return fmt.Sprintf("/dev/vdavinci%d", id) }

// Card is one entry of npu-smi info -l.
type Card struct {
	ID        int
	ChipCount int
}

// MappingEntry is one row of npu-smi info -m.
type MappingEntry struct {
	Card, Chip int
	// LogicID is -1 for rows printed "-" (the card's MCU).
	LogicID int
	// PhyID is -1 where the tool prints no "Chip Phy-ID" column or "-".
	PhyID int
	// Name is the printed chip name: "Ascend 910B3", "Mcu".
	Name string
}

// IsNPU tells a compute chip from the MCU and CPU rows.
func (e MappingEntry) IsNPU() bool { return e.LogicID >= 0 }

// Board is npu-smi info -t board -i N [-c C].
type Board struct {
	Card int
	// Chip is -1 for the card-level query.
	Chip     int
	ChipType string
	ChipName string
	// BusID is "PCIe Bus Info" in the kernel's lower-case form.
	BusID string
	// Fields holds every "key : value" line as printed.
	Fields map[string]string
}

// Memory is npu-smi info -t memory -i N -c C.
type Memory struct {
	HBMCapacityMB int64
	DDRCapacityMB int64
}

// CommonChip is one chip section of npu-smi info -t common -i N.
type CommonChip struct {
	Chip        int
	AICoreCount int
}

// Resource is one "Free/Total" cell of info-vnpu; NA cells have NA set.
type Resource struct {
	Free, Total int
	NA          bool
}

// VNPUInfo is npu-smi info -t info-vnpu -i N -c C.
type VNPUInfo struct {
	// Resources maps the printed column names (AICORE, Memory (GB), AICPU,
	// VPC, VENC, VDEC, JPEGD, JPEGE, PNGD) to their cells.
	Resources map[string]Resource
	VNPUs     []VNPU
}
