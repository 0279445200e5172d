package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/linkmock"
	"github.com/strata-sh/strata/hardware/nvmlmock"
	"github.com/strata-sh/strata/internal/testutil"
)

// The scheduler's DynamicResources plugin builds one allocator per pod and
// calls Allocate for every candidate node. BenchmarkJointAllocation
// measures that cost (allocator construction plus one Allocate per node,
// as in a scheduling cycle that filters every node) for claims that ask
// for GPUs and the RDMA NICs on their PCIe switches, against GPU-only
// claims of the same size, on 1, 100 and 1,000 DGX H100 nodes. Every node
// publishes one slice per driver: nvidia.strata.sh (eight whole GPUs,
// static MIG mode without instances) and rdma.strata.sh (eight
// ConnectX-7 physical functions, each shareable by bandwidth, and their
// 32 virtual functions).
//
// Two cluster states: "empty" (nothing allocated, as in the NVIDIA
// driver's BenchmarkAllocateClaim) and "busy", where on every node the
// NIC on GPU 0's switch is held whole by another claim, so that a
// switch-matched claim has to skip that pair. On busy nodes only seven
// NICs are free: the claims for eight NICs find no allocation on any
// node, and what is measured is the cost of the allocator proving that.
// gpu8+nic8-rails names the rail of each NIC request (as the example
// eight-gpus-rail-aligned.yaml does), so each has one candidate and a
// busy node is turned down at once; without the rail selectors the
// allocator walks every assignment of the seven free NICs to nic0..nic6
// (about 13,700 partial assignments, some 0.3 s per node) first.

// Device classes the claims use.
const (
	gpuClass = "nvidia-gpu.strata.sh"
	nicClass = "rdma-nic.strata.sh"
	// nicSelector is rdma-nic.strata.sh's selector, for the fallback
	// definition used while the chart does not ship the class.
	nicSelector = `device.driver == "rdma.strata.sh" && device.attributes["rdma.strata.sh"].type == "nic"`
)

// switchAttr is the topology attribute both drivers publish.
var switchAttr = resourceapi.FullyQualifiedName(pci.AttrPCIeSwitch)

// strataClasses loads the DeviceClasses the chart ships. Should the chart
// lack rdma-nic.strata.sh, the class is defined here with the chart's
// selector (and the fallback is logged).
func strataClasses(tb testing.TB) testutil.ClassLister {
	out := testutil.StrataClasses(tb)
	if _, ok := out[gpuClass]; !ok {
		tb.Fatalf("the chart ships no DeviceClass %s", gpuClass)
	}
	if _, ok := out[nicClass]; !ok {
		tb.Logf("the chart ships no DeviceClass %s: using the benchmark's own definition", nicClass)
		out[nicClass] = &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: nicClass},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
				{CEL: &resourceapi.CELDeviceSelector{Expression: nicSelector}},
			}},
		}
	}
	return out
}

// machine is one server's inventories as the two backends discover them.
type machine struct {
	gpus, nics *plugin.Inventory
	// devices indexes both inventories by driver and device name.
	devices map[string]resourceapi.Device
}

func deviceKey(driver, name string) string { return driver + "/" + name }

// discover renders m as a fake node and runs both backends' Discover on
// it.
func discover(tb testing.TB, m hardware.Machine) machine {
	ctx := context.Background()
	root := tb.TempDir()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		tb.Fatal(err)
	}
	srv, err := nvmlmock.New(m, "bench")
	if err != nil {
		tb.Fatal(err)
	}
	gpuBackend, err := nvidia.New(nvidia.Config{NVML: srv, SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir),
		FabricPartitionsFile: filepath.Join(root, hardware.FabricPartitionsFile), MIG: nvidia.MIGStatic})
	if err != nil {
		tb.Fatal(err)
	}
	gpus, err := gpuBackend.Discover(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	nicBackend, err := rdma.New(rdma.Config{SysfsRoot: filepath.Join(root, hardware.SysDir), DevRoot: root, Links: linkmock.New(m)})
	if err != nil {
		tb.Fatal(err)
	}
	nics, err := nicBackend.Discover(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	out := machine{gpus: gpus, nics: nics, devices: map[string]resourceapi.Device{}}
	for _, d := range gpus.Devices {
		out.devices[deviceKey(nvidia.DriverName, d.Name)] = d
	}
	for _, d := range nics.Devices {
		out.devices[deviceKey(rdma.DriverName, d.Name)] = d
	}
	return out
}

// stringAttr is a device's string attribute, "" when it has none.
func stringAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	return ptr.Deref(d.Attributes[name].StringValue, "")
}

// cluster is the ResourceSlices and Node objects of identical nodes.
type cluster struct {
	slices []*resourceapi.ResourceSlice
	nodes  []*v1.Node
}

// buildCluster publishes m's inventories on count nodes: per node one pool
// (the node's name) per driver, each in one slice.
func buildCluster(tb testing.TB, m machine, count int) cluster {
	var c cluster
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("node-%04d", i)
		for _, d := range []struct {
			driver string
			inv    *plugin.Inventory
		}{{nvidia.DriverName, m.gpus}, {rdma.DriverName, m.nics}} {
			s, err := plugin.ResourceSlices(d.driver, name, d.inv)
			if err != nil {
				tb.Fatal(err)
			}
			if len(s) != 1 {
				tb.Fatalf("%s on %s: %d slices, want 1", d.driver, name, len(s))
			}
			c.slices = append(c.slices, s...)
		}
		c.nodes = append(c.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	return c
}

func exactly(name, class string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
}

func sameSwitch(requests ...string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: ptr.To(switchAttr)}
}

func newClaim(name string, requests []resourceapi.DeviceRequest, constraints ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	objName := strings.ReplaceAll(name, "+", "-")
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: objName, Namespace: "default", UID: k8stypes.UID("uid-" + objName)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests, Constraints: constraints}},
	}
}

// claimOrder lists the claims in the order they are measured, each
// GPU-only baseline before the joint claims of its size.
var claimOrder = []string{"gpu1", "gpu1+nic-switch", "gpu8", "gpu8+nic8-rails", "gpu8+nic8-count"}

// nicsWanted is how many NICs a claim asks for.
var nicsWanted = map[string]int{"gpu1+nic-switch": 1, "gpu8+nic8-rails": 8, "gpu8+nic8-count": 8}

func jointClaims() map[string]*resourceapi.ResourceClaim {
	var rails []resourceapi.DeviceRequest
	var railConstraints []resourceapi.DeviceConstraint
	for i := 0; i < 8; i++ {
		nic := exactly(fmt.Sprintf("nic%d", i), nicClass, 1)
		nic.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(`device.attributes["rdma.strata.sh"].rail == %d`, i)}}}
		rails = append(rails, nic)
	}
	for i := 0; i < 8; i++ {
		rails = append(rails, exactly(fmt.Sprintf("gpu%d", i), gpuClass, 1))
		railConstraints = append(railConstraints, sameSwitch(fmt.Sprintf("nic%d", i), fmt.Sprintf("gpu%d", i)))
	}
	return map[string]*resourceapi.ResourceClaim{
		"gpu1": newClaim("gpu1", []resourceapi.DeviceRequest{exactly("gpu", gpuClass, 1)}),
		"gpu1+nic-switch": newClaim("gpu1+nic-switch",
			[]resourceapi.DeviceRequest{exactly("nic", nicClass, 1), exactly("gpu", gpuClass, 1)},
			sameSwitch("nic", "gpu")),
		"gpu8":            newClaim("gpu8", []resourceapi.DeviceRequest{exactly("gpu", gpuClass, 8)}),
		"gpu8+nic8-rails": newClaim("gpu8+nic8-rails", rails, railConstraints...),
		"gpu8+nic8-count": newClaim("gpu8+nic8-count", []resourceapi.DeviceRequest{exactly("gpu", gpuClass, 8), exactly("nic", nicClass, 8)}),
	}
}

// record adds an allocated device to state the way the scheduler does for
// every allocated claim with consumable capacity enabled
// (foreachAllocatedDevice in the DynamicResources plugin): a device
// allocated with a share id by its SharedDeviceID and the capacity the
// share consumed, any other device by its DeviceID.
func record(state structured.AllocatedState, r resourceapi.DeviceRequestAllocationResult) {
	if ptr.Deref(r.AdminAccess, false) {
		return
	}
	id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
	if r.ShareID == nil {
		state.AllocatedDevices.Insert(id)
		return
	}
	state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
	if r.ConsumedCapacity != nil {
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
	}
}

// gpu0Switch is the pcieSwitch attribute of GPU 0.
func gpu0Switch(tb testing.TB, m machine) string {
	for _, d := range m.gpus.Devices {
		if stringAttr(d, "type") == "gpu" && ptr.Deref(d.Attributes["index"].IntValue, -1) == 0 {
			if sw := stringAttr(d, pci.AttrPCIeSwitch); sw != "" {
				return sw
			}
			tb.Fatalf("GPU 0 (%s) has no %s", d.Name, pci.AttrPCIeSwitch)
		}
	}
	tb.Fatal("no GPU 0")
	return ""
}

// busyState is c with, on every node, the NIC on GPU 0's switch held
// whole by another claim. That claim (rdma-nic.strata.sh, no capacity
// request, so the port's full bandwidth) is allocated by the allocator on
// the first node; its result is recorded for every node's pool. It
// returns the state and the busy NIC's device name.
func busyState(tb testing.TB, ctx context.Context, classes testutil.ClassLister, m machine, c cluster) (structured.AllocatedState, string) {
	req := exactly("nic", nicClass, 1)
	req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf(`device.attributes[%q].pcieSwitch == %q`, pci.TopologyDomain, gpu0Switch(tb, m)),
	}}}
	tenant := newClaim("tenant", []resourceapi.DeviceRequest{req})
	alloc, err := structured.NewAllocator(ctx, testutil.AllocatorFeatures, testutil.EmptyAllocatedState(), classes, c.slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := alloc.Allocate(ctx, c.nodes[0], []*resourceapi.ResourceClaim{tenant})
	if err != nil || len(res) != 1 || len(res[0].Devices.Results) != 1 {
		tb.Fatalf("allocate the NIC on GPU 0's switch: %v (%d results)", err, len(res))
	}
	held := res[0].Devices.Results[0]
	if held.ShareID == nil || held.ConsumedCapacity == nil {
		tb.Fatalf("NIC %s was allocated without a share id or consumed capacity: %+v", held.Device, held)
	}
	state := testutil.EmptyAllocatedState()
	for _, n := range c.nodes {
		r := *held.DeepCopy()
		r.Pool = n.Name
		r.ShareID = ptr.To(k8stypes.UID("share-" + n.Name))
		record(state, r)
	}
	return state, held.Device
}

// BenchmarkJointAllocation: claim × state (empty | busy) × nodes.
func BenchmarkJointAllocation(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	classes := strataClasses(b)
	h100 := discover(b, hardware.DGXH100())
	claims := jointClaims()
	celCache := cel.NewCache(10, cel.Features{EnableConsumableCapacity: true})
	type setup struct {
		cluster
		busy structured.AllocatedState
	}
	setups := map[int]setup{}
	nodeCounts := []int{1, 100, 1000}
	for _, n := range nodeCounts {
		c := buildCluster(b, h100, n)
		busy, _ := busyState(b, ctx, classes, h100, c)
		setups[n] = setup{cluster: c, busy: busy}
	}
	for _, claimName := range claimOrder {
		claim := claims[claimName]
		for _, state := range []string{"empty", "busy"} {
			// A busy node has seven free NICs: claims for eight fail.
			want := 1
			if state == "busy" && nicsWanted[claimName] == 8 {
				want = 0
			}
			for _, n := range nodeCounts {
				s := setups[n]
				allocated := testutil.EmptyAllocatedState()
				name := fmt.Sprintf("%s/nodes=%d", claimName, n)
				if state == "busy" {
					allocated = s.busy
					name = fmt.Sprintf("%s/busy/nodes=%d", claimName, n)
				}
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						alloc, err := structured.NewAllocator(ctx, testutil.AllocatorFeatures, allocated, classes, s.slices, celCache)
						if err != nil {
							b.Fatal(err)
						}
						for _, node := range s.nodes {
							res, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
							if err != nil || len(res) != want {
								b.Fatalf("allocate on %s: %v (%d results, want %d)", node.Name, err, len(res), want)
							}
						}
					}
				})
			}
		}
	}
}

// allocate runs the allocator for claim on the first node of c and
// returns the devices by request name, nil when it finds no allocation.
func allocate(t *testing.T, ctx context.Context, classes testutil.ClassLister, state structured.AllocatedState, c cluster, claim *resourceapi.ResourceClaim) map[string][]resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	alloc, err := structured.NewAllocator(ctx, testutil.AllocatorFeatures, state, classes, c.slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := alloc.Allocate(ctx, c.nodes[0], []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("claim %s: %v", claim.Name, err)
	}
	if len(res) == 0 {
		return nil
	}
	out := map[string][]resourceapi.DeviceRequestAllocationResult{}
	for _, r := range res[0].Devices.Results {
		out[r.Request] = append(out[r.Request], r)
	}
	return out
}

// pairOnSwitch checks that requests nic and gpu got an RDMA NIC (a
// physical function) and an NVIDIA GPU on one PCIe switch, and returns
// the NIC's and the GPU's device names.
func pairOnSwitch(t *testing.T, m machine, got map[string][]resourceapi.DeviceRequestAllocationResult, nic, gpu string) (string, string) {
	t.Helper()
	if len(got[nic]) != 1 || len(got[gpu]) != 1 {
		t.Fatalf("requests %s, %s got %d and %d devices, want 1 each: %+v", nic, gpu, len(got[nic]), len(got[gpu]), got)
	}
	n, g := got[nic][0], got[gpu][0]
	if n.Driver != rdma.DriverName || g.Driver != nvidia.DriverName {
		t.Fatalf("requests %s, %s: drivers %s, %s", nic, gpu, n.Driver, g.Driver)
	}
	nicDev, gpuDev := m.devices[deviceKey(n.Driver, n.Device)], m.devices[deviceKey(g.Driver, g.Device)]
	if stringAttr(nicDev, "type") != "nic" || stringAttr(gpuDev, "type") != "gpu" {
		t.Fatalf("requests %s, %s: device types %q, %q", nic, gpu, stringAttr(nicDev, "type"), stringAttr(gpuDev, "type"))
	}
	ns, gs := stringAttr(nicDev, pci.AttrPCIeSwitch), stringAttr(gpuDev, pci.AttrPCIeSwitch)
	if ns == "" || ns != gs {
		t.Errorf("NIC %s (switch %q) and GPU %s (switch %q) do not share a switch", n.Device, ns, g.Device, gs)
	}
	return n.Device, g.Device
}

func TestJointAllocation(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	classes := strataClasses(t)
	claims := jointClaims()
	for _, hw := range []hardware.Machine{hardware.DGXH100(), hardware.DGXA100()} {
		t.Run(hw.Name, func(t *testing.T) {
			m := discover(t, hw)
			c := buildCluster(t, m, 1)

			got := allocate(t, ctx, classes, testutil.EmptyAllocatedState(), c, claims["gpu1+nic-switch"])
			if len(got) != 2 {
				t.Fatalf("gpu1+nic-switch: %d devices, want 2: %+v", len(got), got)
			}
			pairOnSwitch(t, m, got, "nic", "gpu")

			got = allocate(t, ctx, classes, testutil.EmptyAllocatedState(), c, claims["gpu8+nic8-rails"])
			if len(got) != 16 {
				t.Fatalf("gpu8+nic8-rails: %d devices, want 16: %+v", len(got), got)
			}
			nics, gpus := sets.New[string](), sets.New[string]()
			for i := 0; i < 8; i++ {
				nic, gpu := pairOnSwitch(t, m, got, fmt.Sprintf("nic%d", i), fmt.Sprintf("gpu%d", i))
				nics.Insert(nic)
				gpus.Insert(gpu)
			}
			if nics.Len() != 8 || gpus.Len() != 8 {
				t.Errorf("gpu8+nic8-rails: %d distinct NICs and %d distinct GPUs, want 8 and 8", nics.Len(), gpus.Len())
			}

			got = allocate(t, ctx, classes, testutil.EmptyAllocatedState(), c, claims["gpu8+nic8-count"])
			if len(got["gpu"]) != 8 || len(got["nic"]) != 8 {
				t.Errorf("gpu8+nic8-count: %d GPUs and %d NICs, want 8 and 8", len(got["gpu"]), len(got["nic"]))
			}

			// With the NIC on GPU 0's switch held by another claim, the
			// pair goes elsewhere and eight NICs are no longer free.
			busy, held := busyState(t, ctx, classes, m, c)
			got = allocate(t, ctx, classes, busy, c, claims["gpu1+nic-switch"])
			if len(got) != 2 {
				t.Fatalf("busy node, gpu1+nic-switch: %d devices, want 2", len(got))
			}
			if nic, _ := pairOnSwitch(t, m, got, "nic", "gpu"); nic == held {
				t.Errorf("busy node, gpu1+nic-switch: got NIC %s, which another claim holds whole", nic)
			}
			if got := allocate(t, ctx, classes, busy, c, claims["gpu8+nic8-rails"]); got != nil {
				t.Errorf("busy node, gpu8+nic8-rails: allocated %+v, want no allocation", got)
			}
			if got := allocate(t, ctx, classes, busy, c, claims["gpu8"]); len(got["gpu"]) != 8 {
				t.Errorf("busy node, gpu8: %+v, want eight GPUs", got)
			}
		})
	}

	// No NIC shares a switch with a GPU (they sit on CPU root ports and
	// publish no pcieSwitch): the switch-matched claim cannot be met,
	// though a GPU and a NIC alone can.
	hw := hardware.HGXH100CPUNICs()
	t.Run(hw.Name, func(t *testing.T) {
		m := discover(t, hw)
		c := buildCluster(t, m, 1)
		if got := allocate(t, ctx, classes, testutil.EmptyAllocatedState(), c, claims["gpu1+nic-switch"]); got != nil {
			t.Errorf("gpu1+nic-switch: allocated %+v, want no allocation", got)
		}
		free := newClaim("gpu1+nic", []resourceapi.DeviceRequest{exactly("nic", nicClass, 1), exactly("gpu", gpuClass, 1)})
		if got := allocate(t, ctx, classes, testutil.EmptyAllocatedState(), c, free); len(got) != 2 {
			t.Errorf("gpu1+nic without constraint: %+v, want a NIC and a GPU", got)
		}
	})
}
