// Package cluster reads the CLUSTER.yaml file of strata-sim: the node
// groups of a simulated cluster, their labels, capacity and hardware.
// The format is documented in docs/strata-sim.md.
package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/internal/decode"
)

// APIVersion and Kind of a cluster file.
const (
	APIVersion = "sim.strata.sh/v1alpha1"
	Kind       = "Cluster"
)

// Cluster is a simulated cluster.
type Cluster struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name labels the cluster in reports.
	Name string `json:"name,omitempty"`
	// NodeGroups are created in order.
	NodeGroups []NodeGroup `json:"nodeGroups"`
	// FeatureGates turn Kubernetes feature gates on or off for the whole
	// control plane, as --feature-gates of kube-apiserver does
	// (strata-sim run --feature-gates overrides them one by one).
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// RuntimeConfig enables or disables API versions, as --runtime-config
	// of kube-apiserver does ("scheduling.k8s.io/v1beta1=true").
	RuntimeConfig []string `json:"runtimeConfig,omitempty"`
}

// NodeGroup is a set of identical nodes.
type NodeGroup struct {
	// Name identifies the group; it is also the default name prefix.
	Name string `json:"name"`
	// Count is the number of nodes, at least 1.
	Count int `json:"count"`
	// NamePrefix is prepended to the node index; default "<name>-".
	NamePrefix string `json:"namePrefix,omitempty"`
	// Labels are added to every node. A value may contain "{index}",
	// replaced by the node's index in the group, and "{index/N}", replaced
	// by the index divided by N, so that groups can be split into
	// topology domains (for example block labels of 4 nodes each).
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are added to every node.
	Taints []corev1.Taint `json:"taints,omitempty"`
	// CPU, Memory and Pods are the node's allocatable resources.
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	Pods   int    `json:"pods,omitempty"`
	// Hardware is a hardware preset such as nvidia-dgx-h100; empty means a
	// node without accelerators.
	Hardware string `json:"hardware,omitempty"`
	// MIG is the NVIDIA plugin's MIG mode: "static" (the default) publishes
	// the instances that exist, "dynamic" publishes every MIG placement of
	// the node's GPUs and creates instances per claim.
	MIG string `json:"mig,omitempty"`
	// MIGConfig is what a MIG manager made before the plugin started, as
	// a mig-parted config entry says it: GPUs in MIG mode with instances.
	MIGConfig []MIGDevices `json:"migConfig,omitempty"`
	// RDMA runs the RDMA kubelet plugin (rdma.strata.sh) on the nodes'
	// NICs and their SR-IOV virtual functions; the hardware preset must
	// have NICs. Off by default, as the chart's plugins.rdma is.
	RDMA bool `json:"rdma,omitempty"`
	// Real makes the group's nodes real ones (package sim/realnode): a
	// kubelet and containerd each, on this machine, running Strata's
	// plugins from their images on simulated machines of the hardware
	// preset (the chart's plugins.<vendor>.simulate) and the pods'
	// containers for real. CPU, Memory and Pods do not apply: a real
	// node reports this machine's.
	Real bool `json:"real,omitempty"`
}

// MIGDevices puts GPUs into MIG mode with the given instances.
type MIGDevices struct {
	// Devices are GPU indices; empty means every GPU.
	Devices []int `json:"devices,omitempty"`
	// MIGDevices counts the instances per profile, e.g. {"3g.40gb": 2}.
	MIGDevices map[string]int `json:"migDevices"`
}

// MIG modes of a node group.
const (
	MIGStatic  = "static"
	MIGDynamic = "dynamic"
)

// Defaults for a node group.
const (
	DefaultCPU    = "64"
	DefaultMemory = "512Gi"
	DefaultPods   = 110
)

// Load reads and validates a cluster file. Unknown fields are errors.
func Load(path string) (*Cluster, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and validates a cluster file.
func Parse(raw []byte) (*Cluster, error) {
	c := &Cluster{}
	if err := decode.Strict(raw, c); err != nil {
		return nil, fmt.Errorf("decode cluster: %w", err)
	}
	c.setDefaults()
	if errs := c.validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return c, nil
}

func (c *Cluster) setDefaults() {
	for i := range c.NodeGroups {
		g := &c.NodeGroups[i]
		if g.NamePrefix == "" {
			g.NamePrefix = g.Name + "-"
		}
		if g.CPU == "" {
			g.CPU = DefaultCPU
		}
		if g.Memory == "" {
			g.Memory = DefaultMemory
		}
		if g.Pods == 0 {
			g.Pods = DefaultPods
		}
	}
}

func (c *Cluster) validate() field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{Kind}))
	}
	groups := field.NewPath("nodeGroups")
	if len(c.NodeGroups) == 0 {
		errs = append(errs, field.Required(groups, "at least one node group"))
	}
	names := map[string]bool{}
	for i, g := range c.NodeGroups {
		p := groups.Index(i)
		if g.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		} else if names[g.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), g.Name))
		}
		names[g.Name] = true
		if g.Count < 1 {
			errs = append(errs, field.Invalid(p.Child("count"), g.Count, "must be at least 1"))
		}
		for _, msg := range validation.IsDNS1123Subdomain(g.NamePrefix + strconv.Itoa(g.Count)) {
			errs = append(errs, field.Invalid(p.Child("namePrefix"), g.NamePrefix, msg))
		}
		for name, q := range map[string]string{"cpu": g.CPU, "memory": g.Memory} {
			if _, err := resource.ParseQuantity(q); err != nil {
				errs = append(errs, field.Invalid(p.Child(name), q, err.Error()))
			}
		}
		if g.MIG != "" && g.MIG != MIGStatic && g.MIG != MIGDynamic {
			errs = append(errs, field.NotSupported(p.Child("mig"), g.MIG, []string{MIGStatic, MIGDynamic}))
		}
		for j, m := range g.MIGConfig {
			mp := p.Child("migConfig").Index(j)
			if len(m.MIGDevices) == 0 {
				errs = append(errs, field.Required(mp.Child("migDevices"), "name the instances to create per profile"))
			}
			for profile, n := range m.MIGDevices {
				if n < 1 {
					errs = append(errs, field.Invalid(mp.Child("migDevices").Key(profile), n, "must be at least 1"))
				}
			}
		}
		if g.Pods < 0 {
			errs = append(errs, field.Invalid(p.Child("pods"), g.Pods, "must not be negative"))
		}
		if g.Real && len(g.MIGConfig) > 0 {
			errs = append(errs, field.Invalid(p.Child("migConfig"), len(g.MIGConfig), "real nodes run dynamic or empty static MIG: a simulated machine starts with no MIG instance"))
		}
		if g.Hardware != "" {
			if m, err := hardware.Lookup(g.Hardware); err != nil {
				errs = append(errs, field.NotSupported(p.Child("hardware"), g.Hardware, hardwareNames()))
			} else if g.RDMA && len(m.NICs()) == 0 {
				errs = append(errs, field.Invalid(p.Child("rdma"), g.RDMA, fmt.Sprintf("hardware preset %s has no RDMA NICs", g.Hardware)))
			}
		} else if g.RDMA {
			errs = append(errs, field.Invalid(p.Child("rdma"), g.RDMA, "needs a hardware preset with RDMA NICs"))
		}
		for k, v := range g.Labels {
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(p.Child("labels").Key(k), k, msg))
			}
			if _, err := expandLabel(v, 0); err != nil {
				errs = append(errs, field.Invalid(p.Child("labels").Key(k), v, err.Error()))
			}
		}
	}
	return errs
}

func hardwareNames() []string {
	var out []string
	for name := range hardware.Machines() {
		out = append(out, name)
	}
	return sortStrings(out)
}

// RealNodeCount is the number of real nodes.
func (c *Cluster) RealNodeCount() int {
	n := 0
	for _, g := range c.NodeGroups {
		if g.Real {
			n += g.Count
		}
	}
	return n
}

// ChartPlugins are the chart's plugins.<vendor> keys of the kubelet
// plugins the cluster's nodes run, besides nvidia (on by default): their
// identities, RBAC and DeviceClasses come from the chart.
func (c *Cluster) ChartPlugins() []string {
	var rdma, ascend, cambricon bool
	for _, g := range c.NodeGroups {
		rdma = rdma || g.RDMA
		if m, err := hardware.Lookup(g.Hardware); err == nil {
			ascend = ascend || len(m.NPUs()) > 0
			cambricon = cambricon || len(m.MLUs()) > 0
		}
	}
	var out []string
	if rdma {
		out = append(out, "rdma")
	}
	if ascend {
		out = append(out, "ascend")
	}
	if cambricon {
		out = append(out, "cambricon")
	}
	return out
}

// NodeCount is the total number of nodes.
func (c *Cluster) NodeCount() int {
	n := 0
	for _, g := range c.NodeGroups {
		n += g.Count
	}
	return n
}

// NodeName returns the name of node i of a group.
func (g NodeGroup) NodeName(i int) string {
	width := len(strconv.Itoa(g.Count - 1))
	return fmt.Sprintf("%s%0*d", g.NamePrefix, width, i)
}

// NodeLabels returns the labels of node i of a group with placeholders
// expanded.
func (g NodeGroup) NodeLabels(i int) map[string]string {
	out := make(map[string]string, len(g.Labels))
	for k, v := range g.Labels {
		expanded, err := expandLabel(v, i)
		if err != nil {
			panic(err) // validated in Parse
		}
		out[k] = expanded
	}
	return out
}

// Capacity returns the node's allocatable resources.
func (g NodeGroup) Capacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(g.CPU),
		corev1.ResourceMemory: resource.MustParse(g.Memory),
		corev1.ResourcePods:   *resource.NewQuantity(int64(g.Pods), resource.DecimalSI),
	}
}

var errBadPlaceholder = errors.New(`placeholders are "{index}" and "{index/N}" with N a positive integer`)
