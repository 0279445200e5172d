package pci

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
)

// TopologyDomain is the attribute domain of the PCI topology that Strata
// adds to the standard attributes. Every Strata driver publishes the same
// fully-qualified names for a PCI device, so one claim can align devices
// of different drivers (a GPU and the NIC beside it) with matchAttribute.
const TopologyDomain = "topology.strata.sh"

// Topology attributes every Strata driver publishes for a PCI device.
const (
	// AttrPCIeRoot is the PCIe root complex ("pci<domain>:<bus>").
	AttrPCIeRoot = deviceattribute.StandardDeviceAttributePCIeRoot
	// AttrPCIBusID is the function's address in extended BDF form.
	AttrPCIBusID = deviceattribute.StandardDeviceAttributePCIBusID
	// AttrNUMANode is the device's NUMA node (scalar form), absent when
	// the platform reports none.
	AttrNUMANode = deviceattribute.StandardDeviceAttributeNUMANode
	// AttrPCIeSwitch is the upstream port of the topmost PCIe switch
	// between the root port and the device, absent when the device hangs
	// directly off a root port. Two devices with the same value talk
	// peer to peer without crossing the root complex (GPUDirect RDMA's
	// fast path).
	AttrPCIeSwitch resourceapi.QualifiedName = TopologyDomain + "/pcieSwitch"
)

// Attributes returns the topology attributes of a PCI function.
func (t Topology) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, 4)
	t.AddAttributes(attrs)
	return attrs
}

// AddAttributes adds the topology attributes of a PCI function to attrs.
func (t Topology) AddAttributes(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
	if t.Root != "" {
		attrs[AttrPCIeRoot] = resourceapi.DeviceAttribute{StringValue: ptr.To(t.Root)}
	}
	if t.BusID != "" {
		attrs[AttrPCIBusID] = resourceapi.DeviceAttribute{StringValue: ptr.To(t.BusID)}
	}
	if t.NUMANode >= 0 {
		attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(t.NUMANode))}
	}
	if t.Switch != "" {
		attrs[AttrPCIeSwitch] = resourceapi.DeviceAttribute{StringValue: ptr.To(t.Switch)}
	}
}
