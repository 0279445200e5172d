package rdma

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// Device kinds, the "type" attribute.
const (
	kindNIC = "nic"
	kindVF  = "vf"
)

// PortDownTaint marks a device whose port is not ACTIVE: new claims avoid
// it, running ones keep it (the link may come back).
const PortDownTaint = DriverName + "/port-down"

// bandwidthStep is the granularity of bandwidth requests: 1 Gb/s.
var bandwidthStep = resource.MustParse("1G")

// buildDevice is the published form of a port.
func buildDevice(p *port) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":       {StringValue: ptr.To(kindNIC)},
		"rdmaDevice": {StringValue: ptr.To(p.rdmaDev)},
		"linkLayer":  {StringValue: ptr.To(p.linkLayer)},
		"portState":  {StringValue: ptr.To(p.state)},
		"rateGbps":   {IntValue: ptr.To(p.rateGbps)},
		"pciVendor":  {StringValue: ptr.To(p.vendorID)},
		"pciDevice":  {StringValue: ptr.To(p.deviceID)},
	}
	if p.netdev != "" {
		attrs["netdev"] = resourceapi.DeviceAttribute{StringValue: ptr.To(p.netdev)}
	}
	if p.guid != "" {
		attrs["guid"] = resourceapi.DeviceAttribute{StringValue: ptr.To(p.guid)}
	}
	if p.mac != "" {
		attrs["mac"] = resourceapi.DeviceAttribute{StringValue: ptr.To(p.mac)}
	}
	if m := p.model(); m != "" {
		attrs["model"] = resourceapi.DeviceAttribute{StringValue: ptr.To(m)}
	}
	if p.rail >= 0 {
		attrs["rail"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(p.rail))}
	}
	p.topology.AddAttributes(attrs)
	rate := *resource.NewScaledQuantity(p.rateGbps, resource.Giga)
	dev := resourceapi.Device{Name: p.name, Attributes: attrs}
	if p.isVF() {
		attrs["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To(kindVF)}
		attrs["vfIndex"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(p.vfIndex))}
		attrs["physfn"] = resourceapi.DeviceAttribute{StringValue: ptr.To(p.pf.busID)}
		// A VF shares its port's rate with the PF's other users; the
		// figure tells a selector what the port can carry.
		dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{resourceName: {Value: rate}}
	} else if p.rateGbps == 0 {
		// A port that reports no rate cannot be shared by rate: whole
		// claims only.
		attrs["sriovTotalVFs"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(p.totalVFs))}
		attrs["sriovNumVFs"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(p.numVFs))}
	} else {
		attrs["sriovTotalVFs"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(p.totalVFs))}
		attrs["sriovNumVFs"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(p.numVFs))}
		dev.AllowMultipleAllocations = ptr.To(true)
		dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{resourceName: {
			Value: rate,
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    ptr.To(rate),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(bandwidthStep), Step: ptr.To(bandwidthStep)},
			},
		}}
	}
	if p.state != "ACTIVE" {
		dev.Taints = []resourceapi.DeviceTaint{{Key: PortDownTaint, Value: p.state, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return dev
}
