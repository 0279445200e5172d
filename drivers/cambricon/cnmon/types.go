package cnmon

import (
	"fmt"
	"strings"
)

// Device nodes of a Cambricon node (driver sources: device/cnhost_dev.c,
// device/cnhost_dev_sysfs.c, ipcm/rpmsg/rpmsg_char.c, commu; see the
// package documentation for their /proc/devices names).
const (
	// ControlDevicePath is the node-wide control node every container
	// gets next to its cards.
	ControlDevicePath = "/dev/cambricon_ctl"
	// CapsDir holds the MLU-instance and sMLU capability nodes.
	CapsDir = "/dev/cambricon-caps"
)

// DevicePath is the node of cnmon card index (the driver names it after
// the card index it enumerates, which is cnmon's "Card" column).
func DevicePath(card int) string { return fmt.Sprintf("/dev/cambricon_dev%d", card) }

// IPCMDevicePath is the IPC node the runtime opens next to DevicePath.
func IPCMDevicePath(card int) string { return fmt.Sprintf("/dev/cambricon_ipcm%d", card) }

// CommuDevicePath is the CNCL communication node of a card (present on
// drivers built with commu; the device plugin adds it when it exists).
func CommuDevicePath(card int) string { return fmt.Sprintf("/dev/commu%d", card) }

// SMLUDevicePath is the capability node of sMLU instance id on card: the
// driver's "cap_dev%d_mi%d" under /dev/cambricon-caps.
func SMLUDevicePath(card, id int) string {
	return fmt.Sprintf("%s/cap_dev%d_mi%d", CapsDir, card, id)
}

// SMLUProfileName is the driver's profile name for an sMLU of vcorePercent
// and memoryMB: "%llup.%llumb" (smlu/smlu_core.c).
func SMLUProfileName(vcorePercent int, memoryMB int64) string {
	return fmt.Sprintf("%dp.%dmb", vcorePercent, memoryMB)
}

// Card is one card as cnmon numbers it. An MLU370-X8 board carries two
// MLU370 chips and cnmon lists each chip as a card of its own, each with
// its own PCI function, /dev/cambricon_devN and half of the board's 48 GB.
type Card struct {
	// Index is cnmon's "Card" (-c), also the N of /dev/cambricon_devN.
	Index int
	// Name is the product name as printed: "MLU370-X8".
	Name string
	// Family is the chip family, the product name before its first '-':
	// "MLU370".
	Family string
	// Firmware is the MCU firmware version: "v1.1.6".
	Firmware string
	// Driver is the driver version: "v5.10.22".
	Driver string
	// BusID is the PCI address in the kernel's form, "0000:39:00.0".
	BusID string
	// MemoryMB is the physical memory total in MiB (cnmon prints MiB).
	MemoryMB int64
	// MLUClusters and MLUCores come from the per-model table below, not
	// from cnmon (no cnmon output found prints them); 0 for models the
	// table does not know.
	MLUClusters, MLUCores int
	// UUID is the card UUID as cnmon prints it, without the "MLU-" prefix
	// the device plugin adds.
	UUID string
	// Mode is the summary's "Mode" column ("FULL"); ComputeMode its
	// "Compute-Mode" ("Default", "Exclusive").
	Mode, ComputeMode string
	// ECCEnabled is false when the summary's Ecc-Error column reads N/A,
	// which Cambricon documents as inline ECC off (ECC on costs memory:
	// the same MLU370-X8 reports 20638 instead of 23374 MiB).
	ECCEnabled bool
}

// Family returns the chip family of a product name: "MLU370-X8" gives
// "MLU370".
func Family(name string) string {
	f, _, _ := strings.Cut(name, "-")
	return f
}

// modelCores is the cluster layout of the MLU370 boards, from the driver's
// attr/cndrv_attr_mlu370.c (MAX_CLUSTER_NUM per board type) and 4 IPU
// cores per cluster (IPUCORE_NUM4 there; mlu-ops' core_num_per_cluster).
// Per cnmon card, that is per chip.
var modelCores = map[string][2]int{
	"MLU370-X8": {4, 4},
	"MLU370-X4": {8, 4},
	"MLU370-S4": {6, 4},
	"MLU370-M8": {8, 4},
}

// ModelCores returns the clusters and MLU cores per card of a product, or
// zeros for one the table does not know.
func ModelCores(name string) (clusters, cores int) {
	c, ok := modelCores[name]
	if !ok {
		return 0, 0
	}
	return c[0], c[0] * c[1]
}

// CardError is why cnmon could not describe a card that its table lists.
type CardError struct {
	// Card is the card's index.
	Card int
	Err  error
}

// Error names the card and the cause.
func (e *CardError) Error() string { return fmt.Sprintf("cnmon card %d: %v", e.Card, e.Err) }

// Unwrap returns the cause.
func (e *CardError) Unwrap() error { return e.Err }

// Summary is plain cnmon: the card table.
type Summary struct {
	// Version is cnmon's own version ("v5.10.22"), Driver the driver's
	// (empty where the header prints none, as cnmon 4.x does).
	Version, Driver string
	Cards           []SummaryCard
}

// SummaryCard is one card of the cnmon table.
type SummaryCard struct {
	Index int
	// VF is the VF column, "/" on a physical function.
	VF       string
	Name     string
	Firmware string
	// BusID is the kernel form, "" for cnmon versions without a Bus-Id
	// column (4.x prints "Inited Driver" there).
	BusID string
	// ECCErrors is the Ecc-Error cell as printed: "N/A" (ECC off) or a
	// count.
	ECCErrors     string
	MemoryUsedMB  int64
	MemoryTotalMB int64
	// Mode is "" where the table has an SR-IOV or vMemory column instead.
	Mode        string
	ComputeMode string
}

// Info is one card of cnmon info.
type Info struct {
	Card        int
	ProductName string
	UUID        string
	Firmware    string
	Driver      string
	ComputeMode string
	// BusID is built from the PCI section, "" if there is none.
	BusID         string
	MemoryTotalMB int64
	MemoryUsedMB  int64
	// Fields holds every "key : value" line, keyed by its section path:
	// "Product Name", "Physical Memory Usage/Total", "PCI/Bus num".
	Fields map[string]string
}

// SMLU is one sMLU instance.
type SMLU struct {
	Card int
	// ID is the instance id: the driver hands out the lowest free id from
	// 1 (ida_simple_get(..., 1, 0, ...)), per card.
	ID          int
	ProfileID   int
	ProfileName string
	// UUID is the card UUID with its tenth byte set to the instance id,
	// as the driver reports it.
	UUID string
	// DeviceNode is the instance's capability node, SMLUDevicePath.
	DeviceNode   string
	VCorePercent int
	MemoryMB     int64
}

// SMLUInfo is the sMLU state of a card.
type SMLUInfo struct {
	Card      int
	Enabled   bool
	Instances []SMLU
}
