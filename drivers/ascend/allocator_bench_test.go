package ascend

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/npusmimock"
	"github.com/strata-sh/strata/internal/testutil"
)

// The scheduler's DynamicResources plugin builds one allocator per pod and
// calls Allocate for every candidate node. BenchmarkAllocateNPU measures
// that for the Ascend plugin's layout on Atlas 800T A2 nodes — "templates"
// (each 910B3 whole plus a slot per vNPU its templates allow, all on one
// counter set per chip: 40 devices in 8 counter sets) — against
// "whole-only" (eight plain chips), for a whole chip, four chips of one
// HCCS half, and a vir05_1c_16g vNPU; per op: allocator construction plus
// one Allocate per node.
func BenchmarkAllocateNPU(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	mock, err := npusmimock.New(npusmimock.Model910B3, 8)
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	if err := hardware.WriteNode(root, hardware.AtlasA2(), "boot"); err != nil {
		b.Fatal(err)
	}
	be, err := New(ctx, Config{Tool: &npusmi.Client{Runner: mock}, SysfsRoot: filepath.Join(root, hardware.SysDir),
		ProcRoot: filepath.Join(root, hardware.ProcDir), DevRoot: root, StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	templates, err := be.Discover(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wholeOnly := &plugin.Inventory{}
	for _, d := range templates.Devices {
		if *d.Attributes["type"].StringValue == kindNPU {
			d := d.DeepCopy()
			d.ConsumesCounters = nil
			wholeOnly.Devices = append(wholeOnly.Devices, *d)
		}
	}
	layouts := map[string]*plugin.Inventory{"whole-only": wholeOnly, "templates": templates}
	claims := map[string]*resourceapi.ResourceClaim{
		"npu":  npuClaim("npu", "ascend-npu.strata.sh", 1, ""),
		"half": npuClaim("half", "ascend-npu.strata.sh", 4, ""),
		"vnpu": npuClaim("vnpu", "ascend-vnpu.strata.sh", 1, `device.attributes["ascend.strata.sh"].template == "vir05_1c_16g"`),
	}
	claims["half"].Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"r"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("accelerator.strata.sh/partition4"))}}
	classes := testutil.StrataClasses(b)
	for _, layout := range []string{"whole-only", "templates"} {
		for _, claimName := range []string{"npu", "half", "vnpu"} {
			if layout == "whole-only" && claimName == "vnpu" {
				continue
			}
			for _, nodes := range []int{1, 100, 1000} {
				var slices []*resourceapi.ResourceSlice
				var nodeObjs []*v1.Node
				for i := 0; i < nodes; i++ {
					name := fmt.Sprintf("node-%04d", i)
					s, err := plugin.ResourceSlices(DriverName, name, layouts[layout])
					if err != nil {
						b.Fatal(err)
					}
					slices = append(slices, s...)
					nodeObjs = append(nodeObjs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
				}
				claim := claims[claimName]
				b.Run(fmt.Sprintf("layout=%s/claim=%s/nodes=%d", layout, claimName, nodes), func(b *testing.B) {
					testutil.BenchmarkAllocate(b, classes, slices, nodeObjs, claim)
				})
			}
		}
	}
}

func npuClaim(name, class string, count int64, expr string) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	if expr != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}},
	}
}
