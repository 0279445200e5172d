package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/internal/linkctl"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim/apply"
)

const (
	nicClass = "rdma-nic.strata.sh"
	vfClass  = "rdma-vf.strata.sh"
)

// deviceIndex is every published device by driver, pool and name.
type deviceIndex map[[3]string]resourceapi.Device

func (e *env) publishedDevices() deviceIndex {
	e.t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := deviceIndex{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			out[[3]string{s.Spec.Driver, s.Spec.Pool.Name, d.Name}] = d
		}
	}
	return out
}

func (ix deviceIndex) of(r resourceapi.DeviceRequestAllocationResult) resourceapi.Device {
	return ix[[3]string{r.Driver, r.Pool, r.Device}]
}

// pinned returns a pod for one node with a claim from a template.
func pinnedPod(name, node, claim, template string) *corev1.Pod {
	p := testutil.MakePod(name).Scheduler(config.ProfileName).ClaimTemplate(claim, template).Obj()
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	return p
}

// deleteAllPods deletes every pod in default, waits for the node agents
// to finalize them and for their claims to be released.
func (e *env) deleteAllPods() {
	e.t.Helper()
	if err := e.client.CoreV1().Pods("default").DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.eventually(2*time.Minute, "every pod gone", func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	})
	e.waitClaimsReleased("default", "every claim released", func(c *resourceapi.ResourceClaim) bool {
		return c.Status.Allocation != nil || len(c.Status.ReservedFor) > 0 ||
			slices.ContainsFunc(c.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Pod" })
	})
}

// rdmaLeftovers lists what the RDMA plugin of a node still holds:
// checkpoint entries, its CDI specs, and VF settings or MTUs not at their
// defaults.
func (e *env) rdmaLeftovers(nodeName string) []string {
	e.t.Helper()
	var out []string
	for uid := range e.checkpointClaims(nodeName, rdma.DriverName) {
		out = append(out, "checkpoint claim "+uid)
	}
	specs, _ := filepath.Glob(filepath.Join(e.node(nodeName).Env.CDIDir, rdma.DriverName+"-*.json"))
	for _, s := range specs {
		out = append(out, "CDI spec "+filepath.Base(s))
	}
	return append(out, e.hardware(nodeName).Links.Changed()...)
}

// TestRDMA runs the RDMA examples on a cluster of DGX H100, DGX A100 and
// an HGX H100 whose NICs sit on the CPUs' root ports.
func TestRDMA(t *testing.T) {
	raw, err := os.ReadFile(examplesDir + "/rdma/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := startCluster(t, string(raw))
	dir := examplesDir + "/rdma"

	t.Run("published", func(t *testing.T) {
		e := e.with(t)
		for nodeName, m := range map[string]hardware.Machine{"h100-0": hardware.DGXH100(), "a100-0": hardware.DGXA100(), "cpu-nics-0": hardware.HGXH100CPUNICs()} {
			nics := e.devicesOf(nodeName, rdma.DriverName, "nic")
			vfs := e.devicesOf(nodeName, rdma.DriverName, "vf")
			gpus := e.devicesOf(nodeName, nvidia.DriverName, "gpu")
			want := m.RDMADevices()
			if len(nics)+len(vfs) != len(want) || len(nics) != len(m.NICs()) {
				t.Fatalf("%s published %d NICs and %d VFs, want %d devices with %d NICs", nodeName, len(nics), len(vfs), len(want), len(m.NICs()))
			}
			byBus := map[string]resourceapi.Device{}
			for _, d := range nics {
				byBus[stringAttr(d, string(pci.AttrPCIBusID))] = d
			}
			for _, d := range vfs {
				byBus[stringAttr(d, string(pci.AttrPCIBusID))] = d
			}
			for _, w := range want {
				d, ok := byBus[w.BusID]
				if !ok {
					t.Errorf("%s: no device for %s (%s)", nodeName, w.Name, w.BusID)
					continue
				}
				for attr, v := range map[resourceapi.QualifiedName]string{
					"rdmaDevice": w.Name, "netdev": w.NetDev, "linkLayer": w.NIC.LinkLayer, "portState": "ACTIVE", "model": w.NIC.Model,
					pci.AttrPCIeRoot: w.Path[0],
				} {
					if got := stringAttr(d, string(attr)); got != v {
						t.Errorf("%s %s: %s = %q, want %q", nodeName, d.Name, attr, got, v)
					}
				}
				if got := intAttr(d, string(pci.AttrNUMANode)); got != int64(w.NUMANode) {
					t.Errorf("%s %s: numaNode %d, want %d", nodeName, d.Name, got, w.NUMANode)
				}
				if got := intAttr(d, "rateGbps"); got != int64(w.NIC.RateGbps) {
					t.Errorf("%s %s: rateGbps %d, want %d", nodeName, d.Name, got, w.NIC.RateGbps)
				}
				if intAttr(d, "rail") < 0 {
					t.Errorf("%s %s: no rail", nodeName, d.Name)
				}
				if w.NIC.LinkLayer == hardware.LinkEthernet && stringAttr(d, "mac") == "" || stringAttr(d, "guid") == "" {
					t.Errorf("%s %s: guid %q mac %q", nodeName, d.Name, stringAttr(d, "guid"), stringAttr(d, "mac"))
				}
			}
			// On the DGX layouts every NIC shares its PCIe switch with a
			// GPU; on the CPU-slot layout none does, and no NIC has a
			// switch at all.
			switches := map[string]bool{}
			for _, g := range gpus {
				switches[stringAttr(g, string(pci.AttrPCIeSwitch))] = true
			}
			for _, n := range nics {
				sw := stringAttr(n, string(pci.AttrPCIeSwitch))
				if nodeName == "cpu-nics-0" {
					if sw != "" {
						t.Errorf("%s %s: pcieSwitch %q on a NIC in a CPU slot", nodeName, n.Name, sw)
					}
				} else if !switches[sw] {
					t.Errorf("%s %s: pcieSwitch %q is no GPU's", nodeName, n.Name, sw)
				}
			}
			for _, n := range nics {
				c := n.Capacity["bandwidth"]
				if !ptr.Deref(n.AllowMultipleAllocations, false) || c.Value.Cmp(*resource.NewScaledQuantity(int64(m.RDMADevices()[0].NIC.RateGbps), resource.Giga)) != 0 {
					t.Errorf("%s %s: shared %v, bandwidth %s", nodeName, n.Name, n.AllowMultipleAllocations, c.Value.String())
				}
			}
		}
	})

	t.Run("plugin-identity", func(t *testing.T) {
		e := e.with(t)
		// The RDMA plugin publishes under its own service account (the
		// slices above are the proof it may); it may not touch the
		// NVIDIA driver's slices of its own node.
		client, err := e.sim.PluginClient(rdma.DriverName, "h100-0")
		if err != nil {
			t.Fatal(err)
		}
		list, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var gpuSlice *resourceapi.ResourceSlice
		for i := range list.Items {
			if s := &list.Items[i]; s.Spec.Driver == nvidia.DriverName && ptr.Deref(s.Spec.NodeName, "") == "h100-0" {
				gpuSlice = s
			}
		}
		if gpuSlice == nil {
			t.Fatal("no NVIDIA slice on h100-0")
		}
		gpuSlice.Labels = map[string]string{"touched": "yes"}
		_, err = client.ResourceV1().ResourceSlices().Update(e.ctx, gpuSlice, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), nvidia.DriverName) {
			t.Errorf("the RDMA plugin changed an NVIDIA slice: %v", err)
		}
	})

	t.Run("same-switch-stream", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/gpu-nic-same-switch.yaml")
		seed := time.Now().UnixNano()
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(uint64(seed), 0))
		// Switch pairs: 8 per DGX H100, 8 per DGX A100, none on the
		// CPU-slot server.
		const capacity = 2*8 + 8
		var live []string
		next := 0
		checked := map[string]bool{}
		ix := e.publishedDevices()
		// At least eight rounds, and on until the cluster was seen full
		// with pods waiting (a pair must never be found across switches
		// then either).
		saturated := false
		for round := 0; round < 8 || !saturated && round < 20; round++ {
			for n := 2 + rng.IntN(6); n > 0; n-- {
				name := fmt.Sprintf("pair-%d", next)
				next++
				e.createPod(testutil.MakePod(name).Scheduler(config.ProfileName).ClaimTemplate("gpu-nic", "gpu-with-nic").Obj())
				live = append(live, name)
			}
			for n := rng.IntN(3); n > 0 && len(live) > 0; n-- {
				i := rng.IntN(len(live))
				e.deletePod("default", live[i])
				live = slices.Delete(live, i, i+1)
			}
			// Settled: every pod runs, or waits while every switch pair
			// of the cluster is taken.
			var pods []corev1.Pod
			e.eventually(90*time.Second, fmt.Sprintf("round %d settled", round), func(ctx context.Context) (bool, error) {
				list, err := e.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				pods = list.Items
				running, waiting := 0, 0
				for _, p := range pods {
					switch {
					case p.Status.Phase == corev1.PodRunning:
						running++
					case isUnschedulable(&p):
						waiting++
					}
				}
				if running+waiting == len(pods) && waiting > 0 && running == capacity {
					saturated = true
					return true, nil
				}
				return running+waiting == len(pods) && waiting == 0, nil
			})
			nicsInUse := map[string]string{}
			for i := range pods {
				p := &pods[i]
				if p.Status.Phase != corev1.PodRunning {
					continue
				}
				if strings.HasPrefix(p.Spec.NodeName, "cpu-nics-") {
					t.Errorf("%s runs on %s, whose NICs share no switch with a GPU", p.Name, p.Spec.NodeName)
				}
				var nic, gpu resourceapi.DeviceRequestAllocationResult
				for _, r := range e.claimResults(p, "gpu-nic") {
					switch r.Request {
					case "nic":
						nic = r
					case "gpu":
						gpu = r
					}
				}
				nsw, gsw := stringAttr(ix.of(nic), string(pci.AttrPCIeSwitch)), stringAttr(ix.of(gpu), string(pci.AttrPCIeSwitch))
				if nsw == "" || nsw != gsw {
					t.Errorf("%s got %s/%s (switch %q) and %s/%s (switch %q)", p.Name, nic.Pool, nic.Device, nsw, gpu.Pool, gpu.Device, gsw)
				}
				key := nic.Pool + "/" + nic.Device
				if other, dup := nicsInUse[key]; dup {
					t.Errorf("%s and %s both hold NIC %s whole", other, p.Name, key)
				}
				nicsInUse[key] = p.Name
				checked[p.Name] = true
			}
		}
		if !saturated || len(checked) < capacity {
			t.Errorf("the stream checked %d allocations and saturated=%t; want the cluster seen full", len(checked), saturated)
		}
		t.Logf("%d pods, %d allocations checked", next, len(checked))
	})

	t.Run("ladder", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		const nodeName = "h100-1"
		// Rail 0's NIC, GPU 1 and the four GPUs of NUMA node 1 are taken:
		// GPUs 2 and 3 still have their switch's NIC, GPU 0 does not.
		e.createTemplate(testutil.MakeClaimSpec().Request("nic", nicClass, 1, `device.attributes["rdma.strata.sh"].rail == 0`).Template("default", "rail0-nic"))
		e.createTemplate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1, `device.attributes["nvidia.strata.sh"].index == 1`).Template("default", "gpu1"))
		e.createTemplate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 4, `device.attributes["resource.kubernetes.io"].numaNode == 1`).Template("default", "numa1-gpus"))
		e.createPod(pinnedPod("rail0-nic", nodeName, "nic", "rail0-nic"))
		e.createPod(pinnedPod("gpu1", nodeName, "gpu", "gpu1"))
		e.createPod(pinnedPod("numa1-gpus", nodeName, "gpu", "numa1-gpus"))
		for _, n := range []string{"rail0-nic", "gpu1", "numa1-gpus"} {
			e.waitRunning("default", n)
		}
		e.applyFile(dir + "/gpu-nic-ladder.yaml") // the template and a pod on any node
		e.deletePod("default", "nearest-nic-worker")
		ix := e.publishedDevices()
		rung := func(pod string) (string, resourceapi.Device, resourceapi.Device) {
			e.createPod(pinnedPod(pod, nodeName, "gpu-nic", "gpu-nic-nearest"))
			p := e.waitRunning("default", pod)
			var sub string
			var nic, gpu resourceapi.Device
			for _, r := range e.claimResults(p, "gpu-nic") {
				if strings.HasPrefix(r.Request, "nic/") {
					sub, nic = r.Request, ix.of(r)
				} else {
					gpu = ix.of(r)
				}
			}
			return sub, nic, gpu
		}
		for _, pod := range []string{"ladder-a", "ladder-b"} {
			sub, nic, gpu := rung(pod)
			if sub != "nic/same-switch" || stringAttr(nic, string(pci.AttrPCIeSwitch)) != stringAttr(gpu, string(pci.AttrPCIeSwitch)) {
				t.Errorf("%s: %s %s + %s, want a same-switch pair while one is free", pod, sub, nic.Name, gpu.Name)
			}
		}
		// No switch pair is left: GPU 0 with a NIC of its NUMA node.
		sub, nic, gpu := rung("ladder-c")
		if sub != "nic/same-numa" || gpu.Name != "gpu-0" || intAttr(nic, string(pci.AttrNUMANode)) != 0 || stringAttr(nic, string(pci.AttrPCIeSwitch)) == stringAttr(gpu, string(pci.AttrPCIeSwitch)) {
			t.Errorf("ladder-c: %s %s (NUMA %d) + %s, want GPU 0 with a NUMA-0 NIC of another switch", sub, nic.Name, intAttr(nic, string(pci.AttrNUMANode)), gpu.Name)
		}
	})

	t.Run("koordinator-joint-vf", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/koordinator-joint-vf.yaml")
		pod := e.waitRunning("default", "pod-vf01")
		ix := e.publishedDevices()
		var vf, gpu resourceapi.DeviceRequestAllocationResult
		for _, r := range e.claimResults(pod, "gpu-vf") {
			if strings.HasPrefix(r.Request, "vf/") {
				vf = r
			} else {
				gpu = r
			}
		}
		sw := stringAttr(ix.of(vf), string(pci.AttrPCIeSwitch))
		if vf.Request != "vf/same-switch" || stringAttr(ix.of(vf), "type") != "vf" || sw == "" || sw != stringAttr(ix.of(gpu), string(pci.AttrPCIeSwitch)) {
			t.Errorf("pod-vf01 got %s %s and %s, want a VF and a GPU on one switch", vf.Request, vf.Device, gpu.Device)
		}
	})

	t.Run("shared-nic", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/shared-nic.yaml")
		a := e.waitRunning("default", "inference-server")
		b := e.waitRunning("default", "data-loader")
		ra, rb := e.claimResults(a, "nic")[0], e.claimResults(b, "nic")[0]
		if ra.Device != rb.Device || ra.Pool != rb.Pool || ra.ShareID == nil || rb.ShareID == nil || *ra.ShareID == *rb.ShareID {
			t.Fatalf("shared NIC pods got %s/%s (share %v) and %s/%s (share %v), want one NIC in two shares", ra.Pool, ra.Device, ra.ShareID, rb.Pool, rb.Device, rb.ShareID)
		}
		for _, r := range []resourceapi.DeviceRequestAllocationResult{ra, rb} {
			if got := r.ConsumedCapacity["bandwidth"]; got.String() != "200G" {
				t.Errorf("consumed bandwidth %s, want 200G", got.String())
			}
		}
		view := e.sim.Nodes.Containers(b.UID)["loader"]
		if !slices.Contains(view.DeviceNodes, "/dev/infiniband/uverbs0") || !slices.Contains(view.DeviceNodes, "/dev/infiniband/rdma_cm") || len(view.NetDevices) != 0 {
			t.Errorf("data-loader container: nodes %v, net devices %v; want uverbs0 and rdma_cm, no interface", view.DeviceNodes, view.NetDevices)
		}
		if !slices.Contains(view.Env, "NCCL_IB_HCA==mlx5_0") {
			t.Errorf("data-loader env %v, want NCCL_IB_HCA==mlx5_0", view.Env)
		}
		// A third half would exceed the port's 400G: it waits until a
		// share is released.
		e.createPod(pinnedPod("third", "h100-0", "nic", "half-a-nic"))
		e.waitUnschedulable("default", "third")
		e.deletePod("default", "inference-server")
		third := e.waitRunning("default", "third")
		if r := e.claimResults(third, "nic")[0]; r.Device != ra.Device {
			t.Errorf("third got %s, want the shared NIC %s", r.Device, ra.Device)
		}
	})

	t.Run("vf", func(t *testing.T) {
		e := e.with(t)
		const nodeName = "cpu-nics-0"
		e.applyFile(dir + "/vf-vlan.yaml")
		pod := e.waitRunning("default", "storage-client")
		if pod.Spec.NodeName != nodeName {
			t.Fatalf("storage-client on %s, want %s (the only RoCE node)", pod.Spec.NodeName, nodeName)
		}
		res := e.claimResults(pod, "vf")[0]
		vf := e.publishedDevices().of(res)
		var want hardware.RDMADevice
		var pfNetdev string
		devs := hardware.HGXH100CPUNICs().RDMADevices()
		for _, d := range devs {
			if d.BusID == stringAttr(vf, string(pci.AttrPCIBusID)) {
				want = d
			}
		}
		for _, d := range devs {
			if d.BusID == want.PF {
				pfNetdev = d.NetDev
			}
		}
		hw := e.hardware(nodeName)
		st, mtu := hw.Links.State(pfNetdev, want.VFIndex, want.NetDev)
		if st != (linkctl.VFState{VLAN: 100, QoS: 3, Trust: true, SpoofCheck: true, MaxTxRateMbps: 100000}) || mtu != 9000 {
			t.Errorf("VF %s of %s: %+v, MTU %d; want VLAN 100 QoS 3, trusted, 100000 Mb/s, MTU 9000", want.NetDev, pfNetdev, st, mtu)
		}
		view := e.sim.Nodes.Containers(pod.UID)["client"]
		if !slices.Contains(view.NetDevices, want.NetDev+"="+want.NetDev) || !slices.Contains(view.DeviceNodes, fmt.Sprintf("/dev/infiniband/uverbs%d", want.Number)) {
			t.Errorf("container: net devices %v, nodes %v; want %s and its uverbs", view.NetDevices, view.DeviceNodes, want.NetDev)
		}
		e.deletePod("default", "storage-client")
		e.eventually(30*time.Second, "VF reset and claim forgotten", func(context.Context) (bool, error) {
			return len(e.rdmaLeftovers(nodeName)) == 0, nil
		})
	})

	t.Run("bad-vf-config", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		// Refused at the door, naming the field.
		objs, err := apply.ReadPaths([]string{dir + "/vf-vlan.yaml"})
		if err != nil {
			t.Fatal(err)
		}
		tmpl := objs[0].DeepCopy()
		tmpl.SetName("bad-vlan")
		cfg := tmpl.Object["spec"].(map[string]any)["spec"].(map[string]any)["devices"].(map[string]any)["config"].([]any)[0].(map[string]any)
		cfg["opaque"].(map[string]any)["parameters"].(map[string]any)["vf"].(map[string]any)["vlan"] = int64(5000)
		err = e.sim.Apply(e.ctx, []apply.Object{{Unstructured: tmpl, Source: "test", Doc: 1}})
		if err == nil || !strings.Contains(err.Error(), "vf.vlan") {
			t.Errorf("a VLAN of 5000 was not refused naming vf.vlan: %v", err)
		}
		// A VLAN on an InfiniBand VF passes admission (the port's link
		// layer is the node's) and is refused at prepare, leaving nothing.
		params := runtime.RawExtension{Raw: []byte(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"vlan":100}}`)}
		e.createTemplate(testutil.MakeClaimSpec().Request("vf", vfClass, 1, `device.attributes["rdma.strata.sh"].linkLayer == "InfiniBand"`).
			Config(rdma.DriverName, params).Template("default", "ib-vlan"))
		e.createPod(testutil.MakePod("ib-vlan").Scheduler(config.ProfileName).ClaimTemplate("vf", "ib-vlan").Obj())
		msg := e.waitEvent("default", "ib-vlan", "FailedPrepareDynamicResources")
		if !strings.Contains(msg, "vf.vlan") || !strings.Contains(msg, "InfiniBand") {
			t.Errorf("prepare failure %q does not name vf.vlan and the InfiniBand port", msg)
		}
		p, err := e.client.CoreV1().Pods("default").Get(e.ctx, "ib-vlan", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if left := e.rdmaLeftovers(p.Spec.NodeName); len(left) != 0 || e.hardware(p.Spec.NodeName).Links.Sets() != 0 {
			t.Errorf("refused claim left %v (%d VF changes)", left, e.hardware(p.Spec.NodeName).Links.Sets())
		}
	})

	t.Run("gang", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/eight-gpus-rail-aligned.yaml")
		e.deletePod("default", "full-node-trainer")
		// One GPU with the NIC on its switch per member, on h100-0 (eight
		// pairs) and cpu-nics-0 (eight GPUs, no pair): nine members wait
		// whole although sixteen GPUs are free; eight run on h100-0.
		e.applyFile(dir + "/gpu-nic-same-switch.yaml")
		e.deletePod("default", "gpudirect-worker")
		onTwoNodes := func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"h100-0", "cpu-nics-0"},
				}}}},
			}}}
		}
		pairGang := func(name string, members int) { e.claimGang(name, members, "gpu-nic", "gpu-with-nic", onTwoNodes) }
		pairGang("nine-pairs", 9)
		e.waitPodGroup("nine-pairs", "gang of nine pairs refused for room", 60*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "Unschedulable"
		})
		if n := boundCount(e.gangPods("nine-pairs")); n != 0 {
			t.Fatalf("%d members of the gang of nine pairs were bound, want none", n)
		}
		for i := 0; i < 9; i++ {
			e.deletePod("default", fmt.Sprintf("nine-pairs-%d", i))
		}
		pairGang("eight-pairs", 8)
		for _, p := range e.waitGangRunning("eight-pairs", 8) {
			if p.Spec.NodeName != "h100-0" {
				t.Errorf("%s placed on %s, want h100-0", p.Name, p.Spec.NodeName)
			}
		}
		for i := 0; i < 8; i++ {
			e.deletePod("default", fmt.Sprintf("eight-pairs-%d", i))
		}

		// Three nodes pair all eight GPUs with a NIC on their switch; the
		// fourth has eight free GPUs but no NIC beside any of them. A gang
		// of four waits whole; a gang of three runs on the three.
		railGang := func(name string, members int) { e.claimGang(name, members, "rails", "eight-gpus-rail-aligned", nil) }
		railGang("four", 4)
		e.waitPodGroup("four", "gang of four refused for room", 60*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "Unschedulable"
		})
		if n := boundCount(e.gangPods("four")); n != 0 {
			t.Fatalf("%d members of the gang of four were bound, want none", n)
		}
		for i := 0; i < 4; i++ {
			e.deletePod("default", fmt.Sprintf("four-%d", i))
		}
		railGang("three", 3)
		pods := e.waitGangRunning("three", 3)
		ix := e.publishedDevices()
		for i := range pods {
			p := &pods[i]
			if strings.HasPrefix(p.Spec.NodeName, "cpu-nics-") {
				t.Errorf("%s placed on %s", p.Name, p.Spec.NodeName)
			}
			res := map[string]resourceapi.Device{}
			for _, r := range e.claimResults(p, "rails") {
				res[r.Request] = ix.of(r)
			}
			for k := 0; k < 8; k++ {
				nic, gpu := res[fmt.Sprintf("nic%d", k)], res[fmt.Sprintf("gpu%d", k)]
				if sw := stringAttr(nic, string(pci.AttrPCIeSwitch)); sw == "" || sw != stringAttr(gpu, string(pci.AttrPCIeSwitch)) {
					t.Errorf("%s pair %d: %s and %s on different switches", p.Name, k, nic.Name, gpu.Name)
				}
			}
		}
	})
}

// claimGang creates a PodGroup of members pods, each with a claim from a
// template; adjust, if set, changes each pod before it is created.
func (e *env) claimGang(name string, members int, claim, template string, adjust func(*corev1.Pod)) {
	e.t.Helper()
	pg := &schedulingv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       schedulingv1alpha1.PodGroupSpec{MinMember: int32(members)},
	}
	if err := e.crClient().Create(e.ctx, pg); err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i < members; i++ {
		p := testutil.MakePod(fmt.Sprintf("%s-%d", name, i)).Scheduler(config.ProfileName).
			Label(schedulingv1alpha1.PodGroupLabel, name).ClaimTemplate(claim, template).Obj()
		if adjust != nil {
			adjust(p)
		}
		e.createPod(p)
	}
}

func isUnschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}
