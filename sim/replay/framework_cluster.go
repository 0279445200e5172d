package replay

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/strata-sh/strata/deployments"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/internal/nvidiapreset"
)

// Cluster is the API objects of a trace's node list as a real cluster
// with Strata would have them: Nodes, the ResourceSlices the NVIDIA
// kubelet plugin publishes for each node's GPUs, and the chart's
// DeviceClasses. It is built once and shared read-only by every seed
// and profile (the fake clientsets copy what they store).
type Cluster struct {
	Nodes   []*corev1.Node
	Slices  []*resourceapi.ResourceSlice
	Classes []*resourceapi.DeviceClass
	// Models are the GPU models of the node list, by the trace's name.
	Models map[string]GPUModel
	// ModelOrder lists the models by how many GPUs of each the cluster
	// has, most first (then by name).
	ModelOrder []string
	// TotalMilli is the cluster's GPUs in milli-GPU.
	TotalMilli int64
}

// GPUModel is what the NVIDIA plugin publishes for a GPU model.
type GPUModel struct {
	// ProductName is the device's productName attribute.
	ProductName string
	// MemoryMiB is the device's memory capacity.
	MemoryMiB int64
}

// BuildCluster turns a node list into the cluster's objects. Each node's
// ResourceSlices are what the real NVIDIA plugin backend discovers on
// the openb hardware preset of its (model, GPUs): the backend runs once
// per preset, against the preset's NVML mock and fake sysfs, with the
// plugin binary's default options, and plugin.ResourceSlices lays the
// inventory out per node as the plugin's publisher does.
func BuildCluster(ctx context.Context, nodes []TraceNode) (*Cluster, error) {
	c := &Cluster{Models: map[string]GPUModel{}}
	var err error
	if c.Classes, err = deployments.DeviceClassObjects(); err != nil {
		return nil, err
	}
	inventories := map[string]*plugin.Inventory{}
	gpus := map[string]int{}
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Name] {
			return nil, fmt.Errorf("node %s is listed twice", n.Name)
		}
		seen[n.Name] = true
		c.Nodes = append(c.Nodes, nodeObject(n))
		if n.GPUs == 0 {
			continue
		}
		preset, ok := hardware.OpenBPreset(n.Model, n.GPUs)
		if !ok {
			return nil, fmt.Errorf("node %s: no openb hardware preset for %d %s GPUs", n.Name, n.GPUs, n.Model)
		}
		inv, ok := inventories[preset]
		if !ok {
			if inv, err = nvidiapreset.Discover(ctx, preset, ""); err != nil {
				return nil, fmt.Errorf("node %s: %w", n.Name, err)
			}
			inventories[preset] = inv
		}
		m, err := modelOf(inv)
		if err != nil {
			return nil, fmt.Errorf("preset %s: %w", preset, err)
		}
		if old, ok := c.Models[n.Model]; ok && old != m {
			return nil, fmt.Errorf("GPU model %s is published as %+v and as %+v", n.Model, old, m)
		}
		c.Models[n.Model] = m
		s, err := nvidiapreset.Slices(n.Name, inv)
		if err != nil {
			return nil, err
		}
		c.Slices = append(c.Slices, s...)
		c.TotalMilli += int64(n.GPUs) * 1000
		gpus[n.Model] += n.GPUs
	}
	c.ModelOrder = slices.SortedFunc(maps.Keys(c.Models), func(a, b string) int {
		return cmp.Or(cmp.Compare(gpus[b], gpus[a]), cmp.Compare(a, b))
	})
	return c, nil
}

// nodeObject is a node with the node list's CPU and memory and room for
// any number of pods.
func nodeObject(n TraceNode) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(n.CPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(n.Memory<<20, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(1000, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// modelOf reads the product name and memory of an inventory's GPUs,
// which must all be of one model (the openb presets are).
func modelOf(inv *plugin.Inventory) (GPUModel, error) {
	var out GPUModel
	for _, d := range inv.Devices {
		if t := d.Attributes["type"].StringValue; t == nil || *t != "gpu" {
			continue
		}
		name := d.Attributes["productName"].StringValue
		mem, ok := d.Capacity["memory"]
		if name == nil || !ok {
			return out, fmt.Errorf("GPU %s has no productName or memory", d.Name)
		}
		m := GPUModel{ProductName: *name, MemoryMiB: mem.Value.Value() >> 20}
		if out.ProductName != "" && out != m {
			return out, fmt.Errorf("GPUs of two models, %+v and %+v", out, m)
		}
		out = m
	}
	if out.ProductName == "" {
		return out, fmt.Errorf("no GPUs discovered")
	}
	return out, nil
}
