package fragscore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/deployments"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/internal/nvidiapreset"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/fragment"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// dgxA100 is the Helm chart's DeviceClasses and the ResourceSlices the
// NVIDIA plugin publishes for DGX A100 nodes in dynamic MIG mode: its
// backend discovering the machine's NVML mock and sysfs tree, laid out
// as its publisher does.
func dgxA100(t testing.TB, nodes ...string) ([]runtime.Object, []*resourceapi.ResourceSlice) {
	t.Helper()
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, c := range classes {
		objs = append(objs, c)
	}
	inv, err := nvidiapreset.Discover(context.Background(), "nvidia-dgx-a100", nvidia.MIGDynamic)
	if err != nil {
		t.Fatal(err)
	}
	var all []*resourceapi.ResourceSlice
	for _, n := range nodes {
		s, err := nvidiapreset.Slices(n, inv)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, s...)
		for _, slice := range s {
			objs = append(objs, slice)
		}
	}
	return objs, all
}

// migClaim is a claim for one instance of a profile, allocated to the
// given placement device if one is named, and a pod using it.
func migClaim(name, profile, node, device string) (*resourceapi.ResourceClaim, *corev1.Pod) {
	c := testutil.MakeClaimSpec().Request("mig", "nvidia-mig.strata.sh", 1).Claim("default", name)
	c.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.attributes["nvidia.strata.sh"].profile == "` + profile + `"`,
	}}}
	c.UID = types.UID("uid-" + name)
	if device != "" {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "mig", Driver: nvidia.DriverName, Pool: node, Device: device,
		}}}}
	}
	p := dct.Pod(name, map[corev1.ResourceName]string{corev1.ResourceCPU: "2", corev1.ResourceMemory: "8Gi"})
	p.UID = types.UID("pod-" + name)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "mig", ResourceClaimName: ptr.To(name)}}
	return c, p
}

// The plugin reads a dynamic-MIG node's layout from the NVIDIA plugin's
// own slices (eight memory slices per A100, each profile's placements),
// its instances from the allocated placements, and a MIG pod's profile
// from its claim's selector. Where whole GPUs and large instances are
// expected, a small instance goes to the node whose GPU already has an
// instance, not to one it would break.
func TestMIGPodPacksInstances(t *testing.T) {
	ctx := context.Background()
	objs, published := dgxA100(t, "a-partitioned", "b-whole")
	device, err := nvidiapreset.PlacementDevice(published, "a-partitioned", 0, "3g.20gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	held, _ := migClaim("held", "3g.20gb", "a-partitioned", device)
	pending, pod := migClaim("small", "1g.5gb", "", "")
	p := withManager(t, dct.DRAManager(ctx, t, append(objs, held, pending)...))
	for i := range 20 {
		task := fragment.Task{CPU: 8000, GPUs: 1, Milli: fragment.Whole}
		if i%2 == 1 {
			task = fragment.Task{CPU: 4000, GPUs: 1, Milli: 500, Profile: "3g.20gb"}
		}
		p.observe(types.UID(rune('a'+i)), task)
	}
	nodes := nodeInfos("a-partitioned", "b-whole")

	devs, err := p.devices.Devices(ctx, classesOf(p.classes(p.classNames)), gpus, nodes)
	if err != nil {
		t.Fatal(err)
	}
	placements, err := p.devices.Devices(ctx, migClassesOf(p.classes(p.migClassNames)), migs, nodes)
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := p.devices.AllocatedState(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := nodeView(nodes[0], devs["a-partitioned"], layoutOf(devs["a-partitioned"], placements["a-partitioned"]), alloc)
	if a.MIG == nil || a.MIG.Slices != 8 || len(a.GPUs) != 8 {
		t.Fatalf("node view %+v; want eight GPUs of eight memory slices", a)
	}
	want := map[string][]uint32{
		"1g.5gb": {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40}, "2g.10gb": {0x03, 0x0c, 0x30},
		"3g.20gb": {0x0f, 0xf0}, "4g.20gb": {0x0f}, "7g.40gb": {0xff},
	}
	for profile, masks := range want {
		if got := a.MIG.Profiles[profile]; !slices.Equal(got, masks) {
			t.Errorf("%s placements %#x, want %#x (NVML's A100 table)", profile, got, masks)
		}
	}
	if a.Slices[0] != 0x0f || a.GPUs[0] != 0 || a.Slices[1] != 0 || a.GPUs[1] != fragment.Whole {
		t.Errorf("GPU 0 slices %#x free %d, GPU 1 slices %#x free %d; want GPU 0 holding the 3g instance, GPU 1 whole", a.Slices[0], a.GPUs[0], a.Slices[1], a.GPUs[1])
	}

	st, err := p.measure(ctx, nil, pod, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if !(st.raw["a-partitioned"] > st.raw["b-whole"]) {
		t.Errorf("raw scores %v; want a-partitioned above b-whole", st.raw)
	}
	task, reqs := p.task(pod, p.classes(p.classNames), p.classes(p.migClassNames))
	if task.GPUs != 0 || len(reqs) != 1 {
		t.Fatalf("task %+v, MIG requests %+v; want no GPUs and one MIG request", task, reqs)
	}
	if got := p.migTask(ctx, task, reqs, nodes, placements, []fragment.Node{a, a}); got.Profile != "1g.5gb" || got.GPUs != 1 || got.Milli != 125 {
		t.Errorf("MIG task %+v; want one 1g.5gb instance of 125 milli", got)
	}
}

// BenchmarkMeasureMIG is one MIG pod's PreScore measure over DGX A100
// nodes in dynamic MIG mode (152 placement devices per node), every
// fourth with a 3g instance on its first GPU: reading the placements,
// laying out each node's GPUs and scoring.
func BenchmarkMeasureMIG(b *testing.B) {
	for _, size := range []int{10, 100} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			names := make([]string, size)
			for i := range names {
				names[i] = fmt.Sprintf("n-%03d", i)
			}
			objs, published := dgxA100(b, names...)
			for i := 0; i < size; i += 4 {
				device, err := nvidiapreset.PlacementDevice(published, names[i], 0, "3g.20gb", 0)
				if err != nil {
					b.Fatal(err)
				}
				held, _ := migClaim("held-"+names[i], "3g.20gb", names[i], device)
				objs = append(objs, held)
			}
			pending, pod := migClaim("small", "1g.5gb", "", "")
			ctx := context.Background()
			p := withManager(b, dct.DRAManager(ctx, b, append(objs, pending)...))
			nodes := nodeInfos(names...)
			for b.Loop() {
				if _, err := p.measure(ctx, nil, pod, nodes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
