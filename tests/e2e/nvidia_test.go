package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/node"
)

const oneA100Node = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: a100
  count: 1
  hardware: nvidia-dgx-a100
  mig: dynamic
`

const oneH100MIGNode = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: h100
  count: 1
  hardware: nvidia-dgx-h100
  mig: dynamic
`

// pinnedGPU creates a pod whose claim asks for the whole GPU with a UUID.
func (e *env) pinnedGPU(name, uuid string) {
	e.t.Helper()
	e.oneDevicePod(name, "gpu", gpuClass, fmt.Sprintf(`device.attributes["nvidia.strata.sh"].uuid == %q`, uuid))
}

// oneDevicePod creates a pod with a claim, named after the request, for
// one device of a class that a CEL expression selects.
func (e *env) oneDevicePod(name, request, class, cel string) {
	e.t.Helper()
	e.createTemplate(testutil.MakeClaimSpec().Request(request, class, 1, cel).Template("default", name))
	e.createPod(testutil.MakePod(name).Scheduler(config.ProfileName).ClaimTemplate(request, name).Obj())
}

// TestMIGExample: the MIG example gets a 1g.5gb instance on an A100, which
// is created on the GPU, injected through its capability devices, keeps
// the whole GPU from being allocated, and is destroyed with the pod.
func TestMIGExample(t *testing.T) {
	e := startCluster(t, oneA100Node)
	const nodeName = "a100-0"
	hw := e.hardware(nodeName)
	e.applyFile(examplesDir + "/nvidia/mig.yaml")
	pod := e.waitRunning("default", "mig-inference")
	res := e.claimResults(pod, "mig")
	if len(res) != 1 || !strings.Contains(res[0].Device, "-mig-1g5gb-") {
		t.Fatalf("allocation = %+v, want one 1g.5gb MIG device", res)
	}
	parent := strings.SplitN(res[0].Device, "-mig-", 2)[0] // gpu-N
	var parentIndex int
	fmt.Sscanf(parent, "gpu-%d", &parentIndex)
	if got := hw.NVML.MIGInstances()[parentIndex]; got != 1 {
		t.Errorf("GPU %d has %d MIG instances, want 1", parentIndex, got)
	}
	view := e.sim.Nodes.Containers(pod.UID)["triton"]
	caps := 0
	for _, n := range view.DeviceNodes {
		if strings.HasPrefix(n, "/dev/nvidia-caps/nvidia-cap") {
			caps++
		}
	}
	if caps != 2 || !slices.Contains(view.DeviceNodes, fmt.Sprintf("/dev/nvidia%d", parentIndex)) {
		t.Errorf("container device nodes %v, want the parent GPU and two MIG capabilities", view.DeviceNodes)
	}
	parentUUID := hw.NVML.Device(parentIndex).UUID
	if gpus := gpuNodes(view.DeviceNodes); len(gpus) != 1 {
		t.Errorf("container GPU nodes %v, want the MIG device's parent only", gpus)
	}

	// The parent GPU cannot be taken whole while the instance exists.
	e.pinnedGPU("whole-parent", parentUUID)
	e.waitUnschedulable("default", "whole-parent")

	e.deletePod("default", "mig-inference")
	e.eventually(30*time.Second, "MIG instance destroyed", func(context.Context) (bool, error) {
		return hw.NVML.MIGInstances()[parentIndex] == 0, nil
	})
	// With the instance gone, the whole GPU is free again.
	whole := e.waitRunning("default", "whole-parent")
	if dev := e.claimResults(whole, "gpu")[0].Device; dev != parent {
		t.Errorf("whole-GPU pod got %s, want %s", dev, parent)
	}
}

// TestSharedGPUExample: two half-GPU claims share one H100 with HAMi-core
// limits; the shared GPU cannot be taken whole, and a third half goes to
// another GPU.
func TestSharedGPUExample(t *testing.T) {
	e := startCluster(t, oneH100Node)
	const nodeName = "h100-0"
	e.applyFile(examplesDir + "/nvidia/shared-hami.yaml")
	a := e.waitRunning("default", "shared-a")
	b := e.waitRunning("default", "shared-b")
	devA, devB := e.claimResults(a, "gpu")[0], e.claimResults(b, "gpu")[0]
	if devA.Device != devB.Device || !strings.HasPrefix(devA.Device, "gpu-") {
		t.Fatalf("shared pods got %s and %s, want the same GPU", devA.Device, devB.Device)
	}
	if devA.ShareID == nil || devB.ShareID == nil || *devA.ShareID == *devB.ShareID {
		t.Errorf("share IDs %v and %v, want two distinct shares", devA.ShareID, devB.ShareID)
	}
	for _, pod := range []*corev1.Pod{a, b} {
		view := e.sim.Nodes.Containers(pod.UID)["worker"]
		for _, want := range []string{"CUDA_DEVICE_MEMORY_LIMIT=40960m", "CUDA_DEVICE_SM_LIMIT=50"} {
			if !slices.Contains(view.Env, want) {
				t.Errorf("%s env %v lacks %s", pod.Name, view.Env, want)
			}
		}
		for _, want := range []string{"/usr/local/vgpu/libvgpu.so", "/etc/ld.so.preload"} {
			if !slices.Contains(view.Mounts, want) {
				t.Errorf("%s mounts %v lack %s", pod.Name, view.Mounts, want)
			}
		}
	}

	var minor int
	fmt.Sscanf(devA.Device, "gpu-%d", &minor)
	sharedUUID := e.hardware(nodeName).NVML.Device(minor).UUID
	e.pinnedGPU("whole-shared-gpu", sharedUUID)
	e.waitUnschedulable("default", "whole-shared-gpu")
	other := e.hardware(nodeName).NVML.Device((minor + 1) % 8).UUID
	e.pinnedGPU("whole-other-gpu", other)
	e.waitRunning("default", "whole-other-gpu")

	e.createPod(testutil.MakePod("shared-c").Scheduler(config.ProfileName).ClaimTemplate("gpu", "half-h100").Obj())
	c := e.waitRunning("default", "shared-c")
	if got := e.claimResults(c, "gpu")[0].Device; got == devA.Device {
		t.Errorf("third half-GPU claim landed on the full GPU %s", got)
	}
}

// TestNVLinkPartitionExamples: with the even GPUs taken, no NVLink pair is
// free: the Restricted claim waits and the BestEffort claim takes an
// unaligned pair; once pairs free up, the Restricted claim gets one.
func TestNVLinkPartitionExamples(t *testing.T) {
	e := startCluster(t, oneH100Node)
	const nodeName = "h100-0"
	hw := e.hardware(nodeName)
	for _, i := range []int{0, 2, 4, 6} {
		e.pinnedGPU(fmt.Sprintf("hold-%d", i), hw.NVML.Device(i).UUID)
		e.waitRunning("default", fmt.Sprintf("hold-%d", i))
	}
	e.applyFile(examplesDir + "/nvidia/nvlink-besteffort.yaml")
	best := e.waitRunning("default", "tp2-besteffort")
	devices := e.devicesOf(nodeName, nvidia.DriverName, "gpu")
	res := e.claimResults(best, "gpus")
	if len(res) != 2 || res[0].Request != "gpus/any" {
		t.Fatalf("best-effort allocation = %+v, want two devices from gpus/any", res)
	}
	if p0, p1 := stringAttr(devices[res[0].Device], "accelerator.strata.sh/partition2"), stringAttr(devices[res[1].Device], "accelerator.strata.sh/partition2"); p0 == p1 {
		t.Errorf("best-effort pair %s, %s shares partition %s although none was free", res[0].Device, res[1].Device, p0)
	}

	e.applyFile(examplesDir + "/nvidia/nvlink-restricted.yaml")
	e.waitUnschedulable("default", "tp2-restricted")
	for _, i := range []int{4, 6} {
		e.deletePod("default", fmt.Sprintf("hold-%d", i))
	}
	restricted := e.waitRunning("default", "tp2-restricted")
	res = e.claimResults(restricted, "gpus")
	p0, p1 := stringAttr(devices[res[0].Device], "accelerator.strata.sh/partition2"), stringAttr(devices[res[1].Device], "accelerator.strata.sh/partition2")
	if p0 == "" || p0 != p1 {
		t.Errorf("restricted pair %s, %s in partitions %q and %q, want one partition", res[0].Device, res[1].Device, p0, p1)
	}
}

// TestSameNUMAAndExtendedResourceExamples: a NUMA-aligned pair, and an
// unchanged pod asking for nvidia.com/gpu through the DeviceClass's
// extended resource name.
func TestSameNUMAAndExtendedResourceExamples(t *testing.T) {
	e := startCluster(t, oneH100Node)
	const nodeName = "h100-0"
	e.applyFile(examplesDir + "/nvidia/same-numa-pair.yaml")
	e.applyFile(examplesDir + "/nvidia/extended-resource.yaml")
	pair := e.waitRunning("default", "numa-pair")
	devices := e.devicesOf(nodeName, nvidia.DriverName, "gpu")
	res := e.claimResults(pair, "gpus")
	if n0, n1 := intAttr(devices[res[0].Device], "accelerator.strata.sh/numaNode"), intAttr(devices[res[1].Device], "accelerator.strata.sh/numaNode"); len(res) != 2 || n0 != n1 {
		t.Errorf("NUMA pair %+v on nodes %d and %d", res, n0, n1)
	}

	legacy := e.waitRunning("default", "legacy-gpu-pod")
	ext := legacy.Status.ExtendedResourceClaimStatus
	if ext == nil {
		t.Fatalf("legacy pod has no extended resource claim")
	}
	claim, err := e.client.ResourceV1().ResourceClaims("default").Get(e.ctx, ext.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(claim.Status.Allocation.Devices.Results); n != 1 {
		t.Errorf("extended resource claim has %d devices, want 1", n)
	}
	gpuNodes := 0
	for _, n := range e.sim.Nodes.Containers(legacy.UID)["cuda"].DeviceNodes {
		if strings.HasPrefix(n, "/dev/nvidia") && n != "/dev/nvidiactl" && !strings.HasPrefix(n, "/dev/nvidia-") {
			gpuNodes++
		}
	}
	if gpuNodes != 1 {
		t.Errorf("legacy container got %d GPU device nodes, want 1", gpuNodes)
	}
}

// TestBadOpaqueConfigFailsPrepareCleanly: bad configs are reported on the
// pod with the field they got wrong, and leave nothing prepared.
func TestBadOpaqueConfigFailsPrepareCleanly(t *testing.T) {
	// Without the admission webhook (a cluster installed with it off, or
	// claims made before Strata was installed) the driver itself refuses
	// the configs when it prepares them; "memory-above-device" depends on
	// the device and is only known then.
	e := startSim(t, oneH100MIGNode, sim.Config{ChartValues: map[string]any{"controller": map[string]any{"webhook": map[string]any{"enabled": false}}}})
	const nodeName = "h100-0"
	raw := func(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
	shared := func() *testutil.ClaimSpecWrapper {
		w := testutil.MakeClaimSpec().Request("gpu", "nvidia-shared.strata.sh", 1)
		w.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			"cores": resource.MustParse("50"), "memory": resource.MustParse("40Gi"),
		}}
		return w
	}
	cases := []struct {
		name, want string
		spec       *testutil.ClaimSpecWrapper
	}{
		{"unknown-field", `unknown field "sharing.hamiCore.coreLimt"`, shared().Config(nvidia.DriverName,
			raw(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimt":20}}}`))},
		{"core-out-of-range", "sharing.hamiCore.coreLimit: Invalid value: 150: must be between 1 and 100", shared().Config(nvidia.DriverName,
			raw(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimit":150}}}`))},
		{"memory-above-device", `sharing.hamiCore.memoryLimit: Invalid value: "100Gi": exceeds the memory of device`, shared().Config(nvidia.DriverName,
			raw(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"memoryLimit":"100Gi"}}}`))},
		{"sharing-on-mig", "sharing: only GPUs take a sharing configuration", testutil.MakeClaimSpec().
			Request("mig", "nvidia-mig.strata.sh", 1, `device.attributes["nvidia.strata.sh"].profile == "1g.10gb"`).
			Config(nvidia.DriverName, raw(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`))},
	}
	for _, c := range cases {
		e.createTemplate(c.spec.Template("default", c.name))
		entry := c.spec.Requests[0].Name
		e.createPod(testutil.MakePod(c.name).Scheduler(config.ProfileName).ClaimTemplate(entry, c.name).Obj())
	}
	for _, c := range cases {
		msg := e.waitEvent("default", c.name, node.ReasonFailedPrepare)
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: event %q does not contain %q", c.name, msg, c.want)
		}
	}
	r, err := e.sim.Report(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Pods {
		if p.Phase != "Pending" || p.Reason != node.ReasonFailedPrepare {
			t.Errorf("report: pod %s is %s/%s, want Pending/%s", p.Name, p.Phase, p.Reason, node.ReasonFailedPrepare)
		}
	}
	if left := e.nvidiaLeftovers(nodeName); len(left) != 0 {
		t.Errorf("failed prepares left %v", left)
	}
}

// TestHealthTaintsFollowTheGPU: a GPU that falls off the bus or reports
// uncorrectable ECC errors is tainted with all its partitions, pods
// pinned to it wait, and the taint goes when the condition does.
func TestHealthTaintsFollowTheGPU(t *testing.T) {
	e := startCluster(t, oneH100MIGNode)
	const nodeName = "h100-0"
	hw := e.hardware(nodeName)
	taintsOf := func(prefix string) map[string][]resourceapi.DeviceTaint {
		out := map[string][]resourceapi.DeviceTaint{}
		for _, typ := range []string{"gpu", "mig"} {
			for name, d := range e.devicesOf(nodeName, nvidia.DriverName, typ) {
				if strings.HasPrefix(name, prefix) && len(d.Taints) > 0 {
					out[name] = d.Taints
				}
			}
		}
		return out
	}
	e.eventually(30*time.Second, "devices published", func(context.Context) (bool, error) {
		return len(e.devicesOf(nodeName, nvidia.DriverName, "gpu")) == 8, nil
	})

	hw.NVML.SetLost(3, true)
	e.eventually(30*time.Second, "gpu-3 and its partitions tainted gpu-lost", func(context.Context) (bool, error) {
		tainted := taintsOf("gpu-3")
		if len(tainted) != 29 { // the GPU and its 28 MIG placements
			return false, nil
		}
		for _, ts := range tainted {
			if !slices.ContainsFunc(ts, func(t resourceapi.DeviceTaint) bool {
				return t.Key == nvidia.TaintGPULost && t.Effect == resourceapi.DeviceTaintEffectNoExecute
			}) {
				return false, nil
			}
		}
		return true, nil
	})
	if other := taintsOf("gpu-2"); len(other) != 0 {
		t.Errorf("healthy GPU tainted: %v", other)
	}
	e.pinnedGPU("on-lost-gpu", hw.NVML.Device(3).UUID)
	e.waitUnschedulable("default", "on-lost-gpu")

	hw.NVML.SetLost(3, false)
	e.eventually(30*time.Second, "gpu-3 taints cleared", func(context.Context) (bool, error) {
		return len(taintsOf("gpu-3")) == 0, nil
	})
	e.waitRunning("default", "on-lost-gpu")

	hw.NVML.SetUncorrectableECC(5, 2)
	e.eventually(30*time.Second, "gpu-5 tainted for ECC", func(context.Context) (bool, error) {
		ts := taintsOf("gpu-5")["gpu-5"]
		return len(ts) == 1 && ts[0].Key == nvidia.TaintECC && ts[0].Value == "2", nil
	})
	hw.NVML.SetUncorrectableECC(5, 0)
	e.eventually(30*time.Second, "gpu-5 ECC taint cleared after reset", func(context.Context) (bool, error) {
		return len(taintsOf("gpu-5")) == 0, nil
	})
}
