package ascend

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/plugin"
)

// Device kinds, the "type" attribute.
const (
	kindNPU  = "npu"
	kindVNPU = "vnpu"
)

// Counters of a chip's counter set.
const (
	counterCores  = "aiCores"
	counterAICPU  = "aiCPU"
	counterMemory = "memory"
)

// device is a published device and what preparing it takes.
type device struct {
	name     string
	kind     string
	npu      *npu
	template *Template
}

// deviceName of a chip is npu-<physical id>; of a vNPU slot,
// npu-<physical id>-<template>-<k> (template name with '_' as '-').
func npuName(n *npu) string { return fmt.Sprintf("npu-%d", n.PhyID) }

func vnpuName(n *npu, t Template, k int) string {
	return fmt.Sprintf("%s-%s-%d", npuName(n), strings.ToLower(strings.ReplaceAll(t.Name, "_", "-")), k)
}

func counterSetName(n *npu) string { return npuName(n) }

// Discover publishes each chip whole and as vNPU slots of every template,
// all drawing on the chip's counter set. vNPUs that exist and that the
// plugin did not make (an operator's) hold their share of the counters.
func (b *Backend) Discover(ctx context.Context) (*plugin.Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	inv := &plugin.Inventory{}
	b.devs = map[string]*device{}
	for _, n := range b.npus {
		foreign, err := b.foreignVNPUsLocked(ctx, n)
		if err != nil {
			return nil, err
		}
		total := map[string]resourceapi.Counter{
			counterCores:  {Value: *resource.NewQuantity(int64(n.AICores), resource.DecimalSI)},
			counterAICPU:  {Value: *resource.NewQuantity(int64(n.aiCPU()), resource.DecimalSI)},
			counterMemory: {Value: mib(n.MemoryMB)},
		}
		available := map[string]resourceapi.Counter{}
		for name, c := range total {
			v := c.Value.DeepCopy()
			for _, t := range foreign {
				v.Sub(templateCounters(t)[name].Value)
			}
			if v.Sign() < 0 {
				v = resource.MustParse("0")
			}
			available[name] = resourceapi.Counter{Value: v}
		}
		inv.SharedCounters = append(inv.SharedCounters, resourceapi.CounterSet{Name: counterSetName(n), Counters: available})
		whole := b.npuDevice(n)
		whole.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(n), Counters: total}}
		inv.Devices = append(inv.Devices, whole)
		b.devs[whole.Name] = &device{name: whole.Name, kind: kindNPU, npu: n}
	}
	for _, n := range b.npus {
		for i := range n.templates {
			t := &n.templates[i]
			for k := 0; k < slots(n, *t); k++ {
				d := b.vnpuDevice(n, *t, k)
				inv.Devices = append(inv.Devices, d)
				b.devs[d.Name] = &device{name: d.Name, kind: kindVNPU, npu: n, template: t}
			}
		}
	}
	return inv, nil
}

// slots is how many vNPUs of a template the chip could hold alone.
func slots(n *npu, t Template) int {
	if t.AICores <= 0 {
		return 0
	}
	k := n.AICores / t.AICores
	if t.MemoryMB > 0 {
		k = min(k, int(n.MemoryMB/t.MemoryMB))
	}
	if t.AICPU > 0 && n.aiCPU() > 0 {
		k = min(k, n.aiCPU()/t.AICPU)
	}
	return k
}

// aiCPU is the chip's AI CPU count: the most any of its templates uses
// times how many of it fit by cores, at least what one template takes.
func (n *npu) aiCPU() int {
	most := 0
	for _, t := range n.templates {
		if t.AICores > 0 {
			most = max(most, t.AICPU*(n.AICores/t.AICores))
		}
	}
	return most
}

func templateCounters(t Template) map[string]resourceapi.Counter {
	return map[string]resourceapi.Counter{
		counterCores:  {Value: *resource.NewQuantity(int64(t.AICores), resource.DecimalSI)},
		counterAICPU:  {Value: *resource.NewQuantity(int64(t.AICPU), resource.DecimalSI)},
		counterMemory: {Value: mib(t.MemoryMB)},
	}
}

func mib(v int64) resource.Quantity { return *resource.NewQuantity(v<<20, resource.BinarySI) }

func (b *Backend) npuDevice(n *npu) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":     {StringValue: ptr.To(kindNPU)},
		"chipName": {StringValue: ptr.To(n.Name)},
		"phyID":    {IntValue: ptr.To(int64(n.PhyID))},
		"logicID":  {IntValue: ptr.To(int64(n.LogicID))},
		"card":     {IntValue: ptr.To(int64(n.Card))},
		"chip":     {IntValue: ptr.To(int64(n.ChipID))},
	}
	n.accel(true, n.MemoryMB<<20).AddAttributes(attrs)
	return resourceapi.Device{
		Name:       npuName(n),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory":  {Value: mib(n.MemoryMB)},
			"aiCores": {Value: *resource.NewQuantity(int64(n.AICores), resource.DecimalSI)},
		},
	}
}

func (b *Backend) vnpuDevice(n *npu, t Template, k int) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":     {StringValue: ptr.To(kindVNPU)},
		"template": {StringValue: ptr.To(t.Name)},
		"chipName": {StringValue: ptr.To(n.Name)},
		"phyID":    {IntValue: ptr.To(int64(n.PhyID))},
	}
	n.accel(false, t.MemoryMB<<20).AddAttributes(attrs)
	return resourceapi.Device{
		Name:       vnpuName(n, t, k),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory":  {Value: mib(t.MemoryMB)},
			"aiCores": {Value: *resource.NewQuantity(int64(t.AICores), resource.DecimalSI)},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(n), Counters: templateCounters(t)}},
	}
}

func (n *npu) accel(whole bool, memoryBytes int64) accelerator.Device {
	d := accelerator.Device{
		Type: accelerator.NPU, Vendor: "huawei", Model: n.family, Whole: whole, MemoryBytes: memoryBytes,
		Topology: n.topology, OwnPCIFunction: whole,
	}
	if whole {
		d.Partitions = n.groups
	}
	return d
}
