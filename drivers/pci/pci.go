// Package pci reads the PCI topology of a device from sysfs: its PCIe root
// complex, the PCIe switch it hangs off and its NUMA node. Every Strata
// backend publishes these so that claims can align devices of different
// drivers (a GPU and the NIC beside it) with matchAttribute.
package pci

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// DefaultSysfsRoot is the host's sysfs.
const DefaultSysfsRoot = "/sys"

// Topology is where a PCI function sits.
type Topology struct {
	// BusID is the function's address in extended BDF form.
	BusID string
	// Root is the PCIe root complex, "pci<domain>:<bus>".
	Root string
	// Switch is the address of the upstream port of the topmost PCIe
	// switch between the root port and the function, or "" when the
	// function hangs directly off a root port.
	Switch string
	// NUMANode is the function's NUMA node, -1 if the platform has none.
	NUMANode int
}

// Reader resolves topology against one sysfs tree.
type Reader struct {
	root string
	fsys fs.FS
}

// NewReader reads from the sysfs mounted at root ("" means /sys).
func NewReader(root string) *Reader {
	if root == "" {
		root = DefaultSysfsRoot
	}
	return &Reader{root: root, fsys: os.DirFS(root)}
}

// Lookup returns the topology of a PCI function. busID may use NVML's
// 8-digit domain; it is normalised to the kernel's 4 digits.
func (r *Reader) Lookup(busID string) (Topology, error) {
	busID = Normalize(busID)
	rootAttr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFSFromRoot(r.root))
	if err != nil {
		return Topology{}, err
	}
	t := Topology{BusID: busID, Root: *rootAttr.Value.StringValue, NUMANode: -1}

	link := path.Join("bus", "pci", "devices", busID)
	target, err := fs.ReadLink(r.fsys, link)
	if err != nil {
		return Topology{}, fmt.Errorf("resolve %s: %w", link, err)
	}
	devPath := path.Clean(path.Join(path.Dir(link), target)) // devices/pciDDDD:BB/.../<busID>
	parts := strings.Split(strings.TrimPrefix(devPath, "devices/"), "/")
	// parts: root complex, root port, [switch upstream port, ...], function.
	if len(parts) >= 4 {
		t.Switch = parts[2]
	}
	raw, err := fs.ReadFile(r.fsys, path.Join(devPath, "numa_node"))
	if err == nil {
		// -1 is the kernel's "no NUMA node"; anything below is no node.
		if n, perr := strconv.Atoi(strings.TrimSpace(string(raw))); perr == nil && n >= -1 {
			t.NUMANode = n
		}
	}
	return t, nil
}

// Normalize turns NVML's "00000000:1B:00.0" into the kernel's "0000:1b:00.0".
func Normalize(busID string) string {
	busID = strings.ToLower(strings.TrimRight(busID, "\x00"))
	if i := strings.IndexByte(busID, ':'); i > 4 {
		busID = busID[i-4:]
	}
	return busID
}
