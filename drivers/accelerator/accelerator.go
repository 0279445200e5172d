// Package accelerator is the vendor-neutral attribute schema that every
// Strata accelerator driver (GPUs, NPUs, MLUs) publishes under the domain
// accelerator.strata.sh, through one helper, so that a claim can ask for
// "any whole accelerator with 64 GiB" or tie accelerators of one
// partition group together without naming a vendor.
package accelerator

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/pci"
)

// Domain is the vendor-neutral attribute domain.
const Domain = "accelerator.strata.sh"

// Type is the kind of accelerator.
type Type string

// Accelerator types.
const (
	GPU Type = "gpu"
	NPU Type = "npu"
	MLU Type = "mlu"
)

// Attribute names of the schema.
const (
	AttrType       resourceapi.QualifiedName = Domain + "/type"
	AttrVendor     resourceapi.QualifiedName = Domain + "/vendor"
	AttrModel      resourceapi.QualifiedName = Domain + "/model"
	AttrWhole      resourceapi.QualifiedName = Domain + "/whole"
	AttrMemory     resourceapi.QualifiedName = Domain + "/memory"
	AttrNUMANode   resourceapi.QualifiedName = Domain + "/numaNode"
	AttrPCIeSwitch resourceapi.QualifiedName = Domain + "/pcieSwitch"
)

// PartitionAttr is the attribute that names a device's group of size
// devices (NVLink partition, HCCS ring, MLU-Link group): devices with the
// same value form one group, so a claim for size devices of one group
// uses matchAttribute on it.
func PartitionAttr(size int) resourceapi.QualifiedName {
	return resourceapi.QualifiedName(fmt.Sprintf("%s/partition%d", Domain, size))
}

// Device is what the schema says about one published device.
type Device struct {
	Type Type
	// Vendor is the maker in lower case: nvidia, huawei, cambricon.
	Vendor string
	// Model is the product family: H100, A100, 910B, MLU370.
	Model string
	// Whole is true for a whole accelerator, false for a partition or a
	// share of one.
	Whole bool
	// MemoryBytes is the memory the device gives a claim; 0 leaves the
	// attribute out.
	MemoryBytes int64
	// Topology is where the accelerator sits on the PCI bus. For a
	// partition it is its parent's; OwnPCIFunction false leaves the bus id
	// out, since the partition is not a PCI function.
	Topology       pci.Topology
	OwnPCIFunction bool
	// Partitions maps a group size to the id of the device's group of that
	// size.
	Partitions map[int]string
}

// AddAttributes adds the schema's attributes, and the PCI topology every
// Strata driver publishes, to attrs.
func (d Device) AddAttributes(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
	attrs[AttrType] = resourceapi.DeviceAttribute{StringValue: ptr.To(string(d.Type))}
	attrs[AttrVendor] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.Vendor)}
	attrs[AttrWhole] = resourceapi.DeviceAttribute{BoolValue: ptr.To(d.Whole)}
	if d.Model != "" {
		attrs[AttrModel] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.Model)}
	}
	if d.MemoryBytes > 0 {
		attrs[AttrMemory] = resourceapi.DeviceAttribute{IntValue: ptr.To(d.MemoryBytes)}
	}
	if d.Topology.NUMANode >= 0 {
		attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.Topology.NUMANode))}
	}
	if d.Topology.Switch != "" {
		attrs[AttrPCIeSwitch] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.Topology.Switch)}
	}
	for size, id := range d.Partitions {
		attrs[PartitionAttr(size)] = resourceapi.DeviceAttribute{StringValue: ptr.To(id)}
	}
	topo := d.Topology
	if !d.OwnPCIFunction {
		topo.BusID = ""
	}
	topo.AddAttributes(attrs)
}
