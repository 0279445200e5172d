package fragscore

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/deployments"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/fragment"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// dgxA100Slices are the ResourceSlices the NVIDIA plugin publishes for a
// DGX A100 node in dynamic MIG mode: its backend discovering the
// machine's NVML mock and sysfs tree, laid out as its publisher does.
func dgxA100Slices(t *testing.T, nodes ...string) []runtime.Object {
	t.Helper()
	root := t.TempDir()
	m := hardware.DGXA100()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	srv, err := nvmlmock.New(m, "dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nvidia.New(nvidia.Config{
		NVML: srv, SysfsRoot: filepath.Join(root, hardware.SysDir), ProcRoot: filepath.Join(root, hardware.ProcDir),
		DevRoot: root, StateDir: filepath.Join(root, "state"),
		FabricPartitionsFile: filepath.Join(root, hardware.FabricPartitionsFile), MIG: nvidia.MIGDynamic,
	})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := b.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, n := range nodes {
		s, err := plugin.ResourceSlices(nvidia.DriverName, n, inv)
		if err != nil {
			t.Fatal(err)
		}
		for _, slice := range s {
			slice.UID, slice.ResourceVersion = types.UID("slice-"+slice.Name), "1"
			out = append(out, slice)
		}
	}
	return out
}

// chartClasses are the Helm chart's NVIDIA DeviceClasses.
func chartClasses(t *testing.T) []runtime.Object {
	t.Helper()
	files, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, name := range slices.Sorted(maps.Keys(files)) {
		c := &resourceapi.DeviceClass{}
		if err := yaml.UnmarshalStrict(files[name], c); err != nil {
			t.Fatalf("chart DeviceClass %s: %v", name, err)
		}
		out = append(out, c)
	}
	return out
}

// migPlacement finds the device of a GPU's placement on a node.
func migPlacement(t *testing.T, objs []runtime.Object, node string, gpu int, profile string, start int64) string {
	t.Helper()
	parent := ""
	for _, o := range objs {
		s, ok := o.(*resourceapi.ResourceSlice)
		if !ok || ptr.Deref(s.Spec.NodeName, "") != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			if a := d.Attributes["index"]; a.IntValue != nil && *a.IntValue == int64(gpu) && *d.Attributes["type"].StringValue == "gpu" {
				parent = *d.Attributes["uuid"].StringValue
			}
		}
		for _, d := range s.Spec.Devices {
			if *d.Attributes["type"].StringValue != "mig" || *d.Attributes["parentUUID"].StringValue != parent {
				continue
			}
			if *d.Attributes["profile"].StringValue == profile && *d.Attributes["placementStart"].IntValue == start {
				return d.Name
			}
		}
	}
	t.Fatalf("node %s has no %s placement at slice %d on GPU %d", node, profile, start, gpu)
	return ""
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
	objs := append(chartClasses(t), dgxA100Slices(t, "a-partitioned", "b-whole")...)
	held, _ := migClaim("held", "3g.20gb", "a-partitioned", migPlacement(t, objs, "a-partitioned", 0, "3g.20gb", 0))
	pending, pod := migClaim("small", "1g.5gb", "", "")
	m := dct.DRAManager(ctx, t, append(objs, held, pending)...)
	pl, err := New(ctx, nil, nil, features)
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*Plugin)
	p.dra = m
	p.devices = newCounter(m)
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
	a := nodeView(nodes[0], devs["a-partitioned"], placements["a-partitioned"], alloc)
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
