package cambricon

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
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/cnmonmock"
	"github.com/strata-sh/strata/internal/testutil"
)

// BenchmarkAllocateMLU measures what the scheduler's DynamicResources
// plugin does per pod (allocator construction plus one Allocate per
// candidate node) for the Cambricon plugin's layout on MLU370-X8 nodes:
// "shared" (sixteen cards that allow several allocations, with consumable
// vcore and vmemory) against "whole-only" (the same cards as plain
// exclusive devices), for a whole card, the two cards of one board, and
// an sMLU share of 10 % and 1Gi.
func BenchmarkAllocateMLU(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	mock, err := cnmonmock.New(cnmonmock.MaxCards)
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	if err := hardware.WriteNode(root, hardware.MLU370X8(), "boot"); err != nil {
		b.Fatal(err)
	}
	be, err := New(ctx, Config{Tool: &cnmon.Client{Runner: mock}, SysfsRoot: filepath.Join(root, hardware.SysDir),
		ProcRoot: filepath.Join(root, hardware.ProcDir), DevRoot: root, StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	shared, err := be.Discover(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wholeOnly := &plugin.Inventory{}
	for _, d := range shared.Devices {
		d := d.DeepCopy()
		d.AllowMultipleAllocations = nil
		for name, c := range d.Capacity {
			c.RequestPolicy = nil
			d.Capacity[name] = c
		}
		wholeOnly.Devices = append(wholeOnly.Devices, *d)
	}
	layouts := map[string]*plugin.Inventory{"whole-only": wholeOnly, "shared": shared}
	claims := map[string]*resourceapi.ResourceClaim{
		"mlu":   mluClaim("mlu", "cambricon-mlu.strata.sh", 1),
		"board": mluClaim("board", "cambricon-mlu.strata.sh", 2),
		"smlu":  mluClaim("smlu", "cambricon-smlu.strata.sh", 1),
	}
	claims["board"].Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"r"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("accelerator.strata.sh/partition2"))}}
	claims["smlu"].Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		CapacityVCore: resource.MustParse("10"), CapacityVMemory: resource.MustParse("1Gi"),
	}}
	classes := testutil.StrataClasses(b)
	for _, layout := range []string{"whole-only", "shared"} {
		for _, claimName := range []string{"mlu", "board", "smlu"} {
			if layout == "whole-only" && claimName == "smlu" {
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

func mluClaim(name, class string, count int64) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}},
	}
}
