package cambricon

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// Capacities of a card, consumed by the claims that share it.
const (
	// CapacityVCore is the percent of the card's MLU time (100 in all).
	CapacityVCore resourceapi.QualifiedName = "vcore"
	// CapacityVMemory is the card's memory in bytes, in steps of the
	// memory unit.
	CapacityVMemory resourceapi.QualifiedName = "vmemory"
)

// fullVCore is a whole card's MLU quota: the driver counts quotas in
// percent of the card.
const fullVCore = 100

// kindMLU is the device's "type" attribute.
const kindMLU = "mlu"

// Discover publishes every card as one shared device. Instances on a card
// that the plugin did not make (an operator's) hold their quota and
// memory: the card offers only what they leave, and no longer whole.
//
// It reads the cards in one pass (vendortool.NewPass), under the lock
// the plugin's liveness is judged by: once cnmon has timed out on a card,
// the cards after it are not queried, and are published as the failing
// one is.
func (b *Backend) Discover(ctx context.Context) (*plugin.Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx = vendortool.NewPass(ctx)
	l, err := b.ledger.Load()
	if err != nil {
		return nil, err
	}
	inv := &plugin.Inventory{}
	health := b.health.Snapshot()
	for _, c := range b.cards {
		info, err := b.cfg.Tool.SMLUInfo(ctx, c.Index)
		if err != nil && ctx.Err() != nil {
			return nil, err // the caller gave up: no verdict on the card
		}
		if err != nil {
			// One card cnmon cannot read must not take the node's other
			// cards off the slices: it is published tainted, with the
			// instances last listed on it (whole if none ever was).
			if c.discoverErr == nil {
				klog.FromContext(ctx).Error(err, "Cannot read MLU's sMLU instances, publishing it tainted", "card", c.Index)
			}
			c.discoverErr = fmt.Errorf("MLU %d: sMLU instances: %w", c.Index, err)
			info = c.smlu
		} else {
			c.discoverErr = nil
			c.smlu = info
		}
		vcore, memory := int64(fullVCore), c.memoryBytes
		for _, in := range info.Instances {
			if holds(l, c.Index, in) {
				continue
			}
			vcore -= int64(in.VCorePercent)
			memory -= in.MemoryMB << 20
		}
		memory = memory / b.cfg.MemoryUnit * b.cfg.MemoryUnit
		if vcore < 1 || memory < b.cfg.MemoryUnit {
			continue // foreign instances hold all of it
		}
		d := b.device(c, vcore, memory, vcore == fullVCore && memory == c.memoryBytes)
		d.Taints = b.taintsLocked(c, health)
		inv.Devices = append(inv.Devices, d)
	}
	return inv, nil
}

// device is a card offering vcore and memory; whole is false when
// instances the plugin did not make hold part of it, which the
// vendor-neutral attributes then say (not whole, the memory left).
func (b *Backend) device(c *card, vcore, memory int64, whole bool) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":        {StringValue: ptr.To(kindMLU)},
		"uuid":        {StringValue: ptr.To(c.UUID)},
		"productName": {StringValue: ptr.To(c.Name)},
		"card":        {IntValue: ptr.To(int64(c.Index))},
		"firmware":    {StringValue: ptr.To(c.Firmware)},
		"eccEnabled":  {BoolValue: ptr.To(c.ECCEnabled)},
	}
	if v, err := version.ParseGeneric(c.Driver); err == nil {
		attrs["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(fmt.Sprintf("%d.%d.%d", v.Major(), v.Minor(), v.Patch()))}
	}
	if c.MLUCores > 0 {
		attrs["mluCores"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(c.MLUCores))}
		attrs["mluClusters"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(c.MLUClusters))}
	}
	accelerator.Device{
		Type: accelerator.MLU, Vendor: "cambricon", Model: c.Family, Whole: whole, MemoryBytes: memory,
		Topology: c.topology, OwnPCIFunction: true, Partitions: c.groups,
	}.AddAttributes(attrs)
	return resourceapi.Device{
		Name:                     deviceName(c),
		Attributes:               attrs,
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityVCore: {
				Value: *resource.NewQuantity(vcore, resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    resource.NewQuantity(vcore, resource.DecimalSI),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(1, resource.DecimalSI), Step: resource.NewQuantity(1, resource.DecimalSI)},
				},
			},
			CapacityVMemory: {
				Value: *resource.NewQuantity(memory, resource.BinarySI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    resource.NewQuantity(memory, resource.BinarySI),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(b.cfg.MemoryUnit, resource.BinarySI), Step: resource.NewQuantity(b.cfg.MemoryUnit, resource.BinarySI)},
				},
			},
		},
	}
}
