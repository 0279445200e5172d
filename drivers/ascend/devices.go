package ascend

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/accelerator"
	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/internal/vendortool"
)

// Device kinds, the "type" attribute.
const (
	kindNPU  = "npu"
	kindVNPU = "vnpu"
)

// Counters of a chip's counter set: every resource npu-smi accounts
// vNPUs by (info-vnpu's columns), so the allocator refuses what npu-smi
// would.
const (
	counterCores  = "ai-cores"
	counterMemory = "memory"
)

// counterSpec maps a counter to its info-vnpu column and a template's
// use of it.
type counterSpec struct {
	name, column string
	use          func(npusmi.Template) int64
	// unit converts the column's figures to the counter's (bytes for
	// memory, which info-vnpu prints in GB under "Memory").
	unit int64
}

var counterSpecs = []counterSpec{
	{counterCores, "AICORE", func(t npusmi.Template) int64 { return int64(t.AICores) }, 1},
	{counterMemory, "Memory", func(t npusmi.Template) int64 { return t.MemoryMB << 20 }, 1 << 30},
	{"ai-cpu", "AICPU", func(t npusmi.Template) int64 { return int64(t.AICPU) }, 1},
	{"vpc", "VPC", func(t npusmi.Template) int64 { return int64(t.VPC) }, 1},
	{"venc", "VENC", func(t npusmi.Template) int64 { return int64(t.VENC) }, 1},
	{"vdec", "VDEC", func(t npusmi.Template) int64 { return int64(t.VDEC) }, 1},
	{"jpegd", "JPEGD", func(t npusmi.Template) int64 { return int64(t.JPEGD) }, 1},
	{"jpege", "JPEGE", func(t npusmi.Template) int64 { return int64(t.JPEGE) }, 1},
	{"pngd", "PNGD", func(t npusmi.Template) int64 { return int64(t.PNGD) }, 1},
}

// device is a published device and what preparing it takes.
type device struct {
	name     string
	kind     string
	npu      *npu
	template *npusmi.Template
}

// deviceName of a chip is npu-<physical id>; of a vNPU slot,
// npu-<physical id>-<template>-<k> (template name with '_' as '-').
func npuName(n *npu) string { return fmt.Sprintf("npu-%d", n.PhyID) }

func vnpuName(n *npu, t npusmi.Template, k int) string {
	return fmt.Sprintf("%s-%s-%d", npuName(n), slotTemplate(t.Name), k)
}

// slotTemplate is a template's name as vNPU slot names carry it.
func slotTemplate(name string) string { return strings.ToLower(strings.ReplaceAll(name, "_", "-")) }

func counterSetName(n *npu) string { return npuName(n) }

// Discover publishes each chip whole and as vNPU slots of every template,
// all drawing on the chip's counter set. vNPUs that exist and that the
// plugin did not make (an operator's) hold their share of the counters.
//
// It reads the chips in one pass (vendortool.NewPass), under the lock
// the plugin's liveness is judged by: once npu-smi has timed out on a
// chip, the chips after it are not queried, and are published as the
// failing one is.
func (b *Backend) Discover(ctx context.Context) (*plugin.Inventory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx = vendortool.NewPass(ctx)
	l, err := b.ledger.Load()
	if err != nil {
		return nil, err
	}
	inv := &plugin.Inventory{}
	b.devs = map[string]*device{}
	health := b.health.Snapshot()
	for _, n := range b.npus {
		usable, foreign, err := b.chipResourcesLocked(ctx, n, l.Instances)
		if err != nil && ctx.Err() != nil {
			return nil, err // the caller gave up: no verdict on the chip
		}
		if err != nil {
			// One chip npu-smi cannot read must not take the node's
			// other chips off the slices: it is published tainted, with
			// what was last read of it (its AI cores if nothing was).
			if n.discoverErr == nil {
				klog.FromContext(ctx).Error(err, "Cannot read NPU, publishing it tainted", "npu", n.PhyID)
			}
			n.discoverErr = err
			if usable = n.usable; usable == nil {
				usable = map[string]int64{counterCores: int64(n.AICores)}
			}
			foreign = n.foreign
		} else {
			n.discoverErr = nil
		}
		n.usable, n.foreign = usable, foreign
		total := map[string]resourceapi.Counter{}
		available := map[string]resourceapi.Counter{}
		for name, v := range usable {
			total[name] = resourceapi.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
			left := v
			for _, t := range foreign {
				left -= use(name, t)
			}
			available[name] = resourceapi.Counter{Value: *resource.NewQuantity(max(left, 0), resource.DecimalSI)}
		}
		inv.SharedCounters = append(inv.SharedCounters, resourceapi.CounterSet{Name: counterSetName(n), Counters: available})
		whole := b.npuDevice(n)
		whole.Taints = b.taintsLocked(n, health)
		whole.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(n), Counters: total}}
		inv.Devices = append(inv.Devices, whole)
		b.devs[whole.Name] = &device{name: whole.Name, kind: kindNPU, npu: n}
	}
	for _, n := range b.npus {
		for i := range n.templates {
			t := &n.templates[i]
			for k := 0; k < slots(n, *t); k++ {
				d := b.vnpuDevice(n, *t, k)
				d.Taints = b.taintsLocked(n, health)
				inv.Devices = append(inv.Devices, d)
				b.devs[d.Name] = &device{name: d.Name, kind: kindVNPU, npu: n, template: t}
			}
		}
	}
	return inv, nil
}

// slots is how many vNPUs of a template the chip could hold alone.
func slots(n *npu, t npusmi.Template) int {
	k := -1
	for name, v := range n.usable {
		u := use(name, t)
		if u <= 0 {
			continue
		}
		if k < 0 || int(v/u) < k {
			k = int(v / u)
		}
	}
	return max(k, 0)
}

// use is how much of a counter a template takes.
func use(counter string, t npusmi.Template) int64 {
	for _, c := range counterSpecs {
		if c.name == counter {
			return c.use(t)
		}
	}
	return 0
}

// templateCounters is what a vNPU of the template consumes of the
// chip's counters.
func templateCounters(n *npu, t npusmi.Template) map[string]resourceapi.Counter {
	out := map[string]resourceapi.Counter{}
	for name := range n.usable {
		if u := use(name, t); u > 0 {
			out[name] = resourceapi.Counter{Value: *resource.NewQuantity(u, resource.DecimalSI)}
		}
	}
	return out
}

func mib(v int64) resource.Quantity { return *resource.NewQuantity(v<<20, resource.BinarySI) }

func (b *Backend) npuDevice(n *npu) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":     {StringValue: ptr.To(kindNPU)},
		"chipName": {StringValue: ptr.To(n.Name)},
		"phyID":    {IntValue: ptr.To(int64(n.PhyID))},
		"logicID":  {IntValue: ptr.To(int64(n.LogicID))},
		"card":     {IntValue: ptr.To(int64(n.Card))},
		"chip":     {IntValue: ptr.To(int64(n.chipID()))},
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

func (b *Backend) vnpuDevice(n *npu, t npusmi.Template, k int) resourceapi.Device {
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
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: counterSetName(n), Counters: templateCounters(n, t)}},
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
