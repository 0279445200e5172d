package nvidia

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
	"github.com/strata-sh/strata/internal/testutil"
)

// The scheduler's DynamicResources plugin builds one allocator per pod and
// calls Allocate for every candidate node. These benchmarks measure that
// cost for the slice layouts the NVIDIA plugin publishes — "default" (one
// device per GPU with consumable capacity, used whole or shared; static
// MIG without instances) and "dynamic-mig" (the same plus every MIG
// placement, drawing on shared counters) — against "whole-only" (plain
// whole GPUs), on 1, 100 and 1,000 DGX H100 nodes; "sparse-mig" is an
// alternative dynamic layout measured for comparison.
//
// Reported per claim: ns/op for allocator construction plus one Allocate
// per node, as in a scheduling cycle that filters every node.

// nodeInventory discovers one DGX H100 through the real backend.
func nodeInventory(b *testing.B, migMode MIGMode) *plugin.Inventory {
	root := b.TempDir()
	m := hardware.DGXH100()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		b.Fatal(err)
	}
	srv, err := nvmlmock.New(m, "bench")
	if err != nil {
		b.Fatal(err)
	}
	backend, err := New(Config{NVML: srv, SysfsRoot: filepath.Join(root, "sys"), ProcRoot: filepath.Join(root, "proc"),
		FabricPartitionsFile: filepath.Join(root, hardware.FabricPartitionsFile), MIG: migMode})
	if err != nil {
		b.Fatal(err)
	}
	inv, err := backend.Discover(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return inv
}

// wholeOnly keeps the GPUs of an inventory as plain devices: the layout
// of a driver that knows neither MIG nor sharing.
func wholeOnly(inv *plugin.Inventory) *plugin.Inventory {
	out := &plugin.Inventory{}
	for _, d := range inv.Devices {
		if *d.Attributes["type"].StringValue == "gpu" {
			d = *d.DeepCopy()
			d.ConsumesCounters = nil
			d.AllowMultipleAllocations = nil
			d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": d.Capacity["memory"]}
			out.Devices = append(out.Devices, d)
		}
	}
	return out
}

// sparseMIG keeps one MIG placement per profile and GPU (the lowest): the
// layout a driver would publish if it offered only the next free
// placement of each profile and republished as instances come and go. It
// is not a layout Strata publishes — placements would be hidden until the
// plugin republishes — but it shows what fewer devices buy.
func sparseMIG(inv *plugin.Inventory) *plugin.Inventory {
	out := &plugin.Inventory{SharedCounters: inv.SharedCounters}
	seen := map[string]bool{}
	for _, d := range inv.Devices {
		if *d.Attributes["type"].StringValue == "mig" {
			key := *d.Attributes["parentUUID"].StringValue + "/" + *d.Attributes["profile"].StringValue
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		out.Devices = append(out.Devices, d)
	}
	return out
}

func clusterSlices(b *testing.B, inv *plugin.Inventory, nodes int) ([]*resourceapi.ResourceSlice, []*v1.Node) {
	var slices []*resourceapi.ResourceSlice
	var nodeObjs []*v1.Node
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("node-%04d", i)
		s, err := plugin.ResourceSlices(DriverName, name, inv)
		if err != nil {
			b.Fatal(err)
		}
		slices = append(slices, s...)
		nodeObjs = append(nodeObjs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	return slices, nodeObjs
}

func benchClaim(name string, req resourceapi.DeviceRequest, constraints ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}, Constraints: constraints}},
	}
}

func exact(class string, count int64, cel string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	if cel != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}
	}
	return r
}

func benchClaims() map[string]*resourceapi.ResourceClaim {
	shared := exact("nvidia-shared.strata.sh", 1, "")
	shared.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		"cores": resource.MustParse("50"), "memory": resource.MustParse("40Gi"),
	}}
	return map[string]*resourceapi.ResourceClaim{
		"gpu":        benchClaim("gpu", exact("nvidia-gpu.strata.sh", 1, "")),
		"mig":        benchClaim("mig", exact("nvidia-mig.strata.sh", 1, `device.attributes["nvidia.strata.sh"].profile == "1g.10gb"`)),
		"shared":     benchClaim("shared", shared),
		"partition4": benchClaim("partition4", exact("nvidia-gpu.strata.sh", 4, ""), resourceapi.DeviceConstraint{Requests: []string{"r"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("accelerator.strata.sh/partition4"))}),
	}
}

// BenchmarkAllocateClaim: layout (full | whole-only) × claim × nodes.
func BenchmarkAllocateClaim(b *testing.B) {
	def := nodeInventory(b, MIGStatic)
	dynamic := nodeInventory(b, MIGDynamic)
	layouts := map[string]*plugin.Inventory{"whole-only": wholeOnly(def), "default": def, "dynamic-mig": dynamic, "sparse-mig": sparseMIG(dynamic)}
	classes := testutil.StrataClasses(b)
	for _, layout := range []string{"whole-only", "default", "dynamic-mig", "sparse-mig"} {
		for _, claimName := range []string{"gpu", "partition4", "shared", "mig"} {
			hasMIG := layout == "dynamic-mig" || layout == "sparse-mig"
			if (layout == "whole-only" && claimName == "shared") || (!hasMIG && claimName == "mig") {
				continue // the layout has no such devices
			}
			for _, nodes := range []int{1, 100, 1000} {
				slices, nodeObjs := clusterSlices(b, layouts[layout], nodes)
				claim := benchClaims()[claimName]
				b.Run(fmt.Sprintf("layout=%s/claim=%s/nodes=%d", layout, claimName, nodes), func(b *testing.B) {
					testutil.BenchmarkAllocate(b, classes, slices, nodeObjs, claim)
				})
			}
		}
	}
}
