package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/strata-sh/strata/drivers/ascend"
	"github.com/strata-sh/strata/drivers/cambricon"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/report"
)

const oneH100Node = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: h100
  count: 1
  hardware: nvidia-dgx-h100
`

const gpuClass = "nvidia-gpu.strata.sh"

// TestWholeGPULifecycle follows one GPU through the whole DRA path: the
// plugin publishes it, the scheduler allocates it to a claim, the node
// prepares it over gRPC and the CDI spec injects it, and after the pod is
// deleted the claim is unprepared, the spec removed and the GPU free again.
func TestWholeGPULifecycle(t *testing.T) {
	e := startCluster(t, oneH100Node)
	const nodeName = "h100-0"
	hw := e.hardware(nodeName)
	layout := hw.Machine.GPUs()

	// Published: eight GPUs named by minor number with their real topology.
	var devices map[string]resourceapi.Device
	e.eventually(30*time.Second, "8 GPUs published", func(ctx context.Context) (bool, error) {
		devices = e.devicesOf(nodeName, nvidia.DriverName, "gpu")
		return len(devices) == 8, nil
	})
	gpu3, ok := devices["gpu-3"]
	if !ok {
		t.Fatalf("no device gpu-3 in %v", keys(devices))
	}
	wantAttrs := map[string]string{
		"productName":                      "NVIDIA H100 80GB HBM3",
		"architecture":                     "Hopper",
		"accelerator.strata.sh/model":      "H100",
		"accelerator.strata.sh/vendor":     "nvidia",
		"resource.kubernetes.io/pciBusID":  layout[3].BusID(),
		"resource.kubernetes.io/pcieRoot":  layout[3].Root(),
		"accelerator.strata.sh/pcieSwitch": layout[3].Path[2],
	}
	for name, want := range wantAttrs {
		if got := stringAttr(gpu3, name); got != want {
			t.Errorf("gpu-3 attribute %s = %q, want %q", name, got, want)
		}
	}
	if got := intAttr(gpu3, "accelerator.strata.sh/numaNode"); got != int64(layout[3].NUMANode) {
		t.Errorf("gpu-3 numaNode = %d, want %d", got, layout[3].NUMANode)
	}
	if got := versionAttr(gpu3, "cudaComputeCapability"); got != "9.0.0" {
		t.Errorf("gpu-3 cudaComputeCapability = %q, want 9.0.0", got)
	}
	if mem := gpu3.Capacity["memory"].Value; mem.Cmp(resource.MustParse("80Gi")) != 0 {
		t.Errorf("gpu-3 memory = %s, want 80Gi", mem.String())
	}
	uuid := stringAttr(gpu3, "uuid")
	if want := hw.NVML.Device(3).UUID; uuid != want {
		t.Fatalf("gpu-3 uuid = %q, want the hardware's %q", uuid, want)
	}

	// Allocated by CEL on the UUID, prepared, injected.
	e.createTemplate(testutil.MakeClaimSpec().
		Request("gpu", gpuClass, 1, fmt.Sprintf(`device.attributes["nvidia.strata.sh"].uuid == %q`, uuid)).
		Template("default", "gpu3"))
	e.createPod(testutil.MakePod("first").Scheduler(config.ProfileName).ClaimTemplate("gpu", "gpu3").Obj())
	pod := e.waitRunning("default", "first")
	if pod.Spec.NodeName != nodeName {
		t.Fatalf("pod on %q, want %q", pod.Spec.NodeName, nodeName)
	}
	claim := e.podClaim(pod, "gpu")
	results := claim.Status.Allocation.Devices.Results
	if len(results) != 1 || results[0].Driver != nvidia.DriverName || results[0].Pool != nodeName || results[0].Device != "gpu-3" {
		t.Fatalf("allocation = %+v, want gpu-3 of %s", results, nodeName)
	}
	if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].UID != pod.UID {
		t.Errorf("reservedFor = %+v, want the pod", claim.Status.ReservedFor)
	}

	specPath := e.cdiSpecPath(nodeName, claim.UID)
	spec := readCDISpec(t, specPath)
	if len(spec.Devices) != 1 {
		t.Fatalf("CDI spec has %d devices, want 1", len(spec.Devices))
	}
	nodes := spec.Devices[0].ContainerEdits.DeviceNodes
	if len(nodes) != 1 || nodes[0].Path != "/dev/nvidia3" || nodes[0].Major != hardware.NvidiaMajor || nodes[0].Minor != 3 || nodes[0].Type != "c" {
		t.Errorf("GPU device node = %+v, want c 195:3 /dev/nvidia3", nodes)
	}
	// The container sees the GPU through its device node; the NVIDIA
	// runtime hook is told to add nothing.
	if !slices.Contains(spec.ContainerEdits.Env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("CDI env %v lacks NVIDIA_VISIBLE_DEVICES=void", spec.ContainerEdits.Env)
	}
	view := e.sim.Nodes.Containers(pod.UID)["main"]
	for _, want := range []string{"/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"} {
		if !slices.Contains(view.DeviceNodes, want) {
			t.Errorf("container device nodes %v lack %s", view.DeviceNodes, want)
		}
	}
	if gpus := gpuNodes(view.DeviceNodes); len(gpus) != 1 {
		t.Errorf("container GPU nodes %v, want /dev/nvidia3 only (uuid %s)", gpus, uuid)
	}
	if got := e.checkpointClaims(nodeName, nvidia.DriverName)[string(claim.UID)]; got != "PrepareCompleted" {
		t.Errorf("checkpoint phase of claim = %q, want PrepareCompleted", got)
	}

	// Deleted: unprepared, spec removed, claim gone, GPU free.
	e.deletePod("default", "first")
	e.eventually(30*time.Second, "CDI spec removed", func(context.Context) (bool, error) {
		return !fileExists(specPath), nil
	})
	e.eventually(30*time.Second, "generated claim deleted", func(ctx context.Context) (bool, error) {
		_, err := e.client.ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if cp := e.checkpointClaims(nodeName, nvidia.DriverName); len(cp) != 0 {
		t.Errorf("checkpoint still holds %v after unprepare", cp)
	}
	e.createTemplate(testutil.MakeClaimSpec().Request("gpus", gpuClass, 8).Template("default", "all-gpus"))
	e.createPod(testutil.MakePod("second").Scheduler(config.ProfileName).ClaimTemplate("gpus", "all-gpus").Obj())
	second := e.waitRunning("default", "second")
	if n := len(e.podClaim(second, "gpus").Status.Allocation.Devices.Results); n != 8 {
		t.Errorf("second pod got %d GPUs, want all 8", n)
	}
}

// TestPluginRestartBetweenPrepareAndUnprepare restarts the kubelet plugin
// while a claim is prepared: the new instance must still know the claim
// and clean it up when the pod goes.
func TestPluginRestartBetweenPrepareAndUnprepare(t *testing.T) {
	e := startCluster(t, oneH100Node)
	const nodeName = "h100-0"
	e.createTemplate(testutil.MakeClaimSpec().
		Request("gpu", gpuClass, 1, `device.attributes["nvidia.strata.sh"].index == 5`).
		Template("default", "gpu5"))
	e.createPod(testutil.MakePod("job").Scheduler(config.ProfileName).ClaimTemplate("gpu", "gpu5").Obj())
	pod := e.waitRunning("default", "job")
	claim := e.podClaim(pod, "gpu")
	specPath := e.cdiSpecPath(nodeName, claim.UID)
	if !fileExists(specPath) {
		t.Fatalf("CDI spec %s missing after prepare", specPath)
	}

	if err := e.node(nodeName).RestartPlugin(e.ctx, nvidia.DriverName); err != nil {
		t.Fatalf("restart plugin: %v", err)
	}
	if got := e.checkpointClaims(nodeName, nvidia.DriverName)[string(claim.UID)]; got != "PrepareCompleted" {
		t.Fatalf("after restart checkpoint phase = %q, want PrepareCompleted", got)
	}
	if !fileExists(specPath) {
		t.Fatalf("restart removed the CDI spec of a prepared claim")
	}

	e.deletePod("default", "job")
	e.eventually(30*time.Second, "CDI spec removed by the restarted plugin", func(context.Context) (bool, error) {
		return !fileExists(specPath), nil
	})
	if cp := e.checkpointClaims(nodeName, nvidia.DriverName); len(cp) != 0 {
		t.Errorf("checkpoint still holds %v", cp)
	}
	// The same GPU is allocatable again.
	e.createPod(testutil.MakePod("next").Scheduler(config.ProfileName).ClaimTemplate("gpu", "gpu5").Obj())
	next := e.waitRunning("default", "next")
	if dev := e.podClaim(next, "gpu").Status.Allocation.Devices.Results[0].Device; dev != "gpu-5" {
		t.Errorf("next pod got %s, want gpu-5", dev)
	}
}

// TestUnsatisfiableSelectorStaysPending: a claim no device can satisfy
// leaves its pod Pending with the scheduler's reason in the report, and
// the cluster keeps scheduling other pods.
func TestUnsatisfiableSelectorStaysPending(t *testing.T) {
	e := startCluster(t, oneH100Node)
	e.createTemplate(testutil.MakeClaimSpec().
		Request("gpu", gpuClass, 1, `device.capacity["nvidia.strata.sh"].memory.compareTo(quantity("1Ti")) >= 0`).
		Template("default", "huge-gpu"))
	e.createPod(testutil.MakePod("too-big").Scheduler(config.ProfileName).ClaimTemplate("gpu", "huge-gpu").Obj())
	// StrataDeviceFit answers before the allocator: no device matches.
	const reason = "request gpu: 0 free matching devices on the node, needs 1"
	cond := e.waitUnschedulable("default", "too-big")
	if !strings.Contains(cond.Message, reason) {
		t.Errorf("unschedulable message %q does not say no device matches the claim", cond.Message)
	}

	e.createTemplate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Template("default", "any-gpu"))
	e.createPod(testutil.MakePod("fits").Scheduler(config.ProfileName).ClaimTemplate("gpu", "any-gpu").Obj())
	e.waitRunning("default", "fits")

	r, err := e.sim.Report(e.ctx)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	byName := map[string]report.Pod{}
	for _, p := range r.Pods {
		byName[p.Name] = p
	}
	if p := byName["too-big"]; p.Phase != "Pending" || p.Reason != "Unschedulable" || !strings.Contains(p.Message, reason) {
		t.Errorf("report for too-big = %+v, want Pending/Unschedulable with the scheduler's message", p)
	}
	if p := byName["fits"]; p.Phase != "Running" || len(p.Claims) != 1 || len(p.Claims[0].Devices) != 1 {
		t.Errorf("report for fits = %+v, want Running with one device", p)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "default/too-big: Unschedulable:") {
		t.Errorf("table report does not explain the pending pod:\n%s", table.String())
	}
}

// runSim runs strata-sim as "run --once --report json" with o's cluster
// and manifests, and returns the report.
func runSim(t *testing.T, o sim.RunOptions) *report.Report {
	t.Helper()
	var out bytes.Buffer
	o.Once, o.Format, o.Timeout, o.Quiet, o.Out = true, sim.FormatJSON, time.Minute, time.Second, &out
	if err := sim.Run(context.Background(), o); err != nil {
		t.Fatalf("strata-sim run: %v", err)
	}
	var r report.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("decode report: %v\n%s", err, out.String())
	}
	return &r
}

// TestDemo runs what "make demo" runs and checks that every demo pod runs
// with the devices its claims ask for.
func TestDemo(t *testing.T) {
	const dir = "../../deployments/examples/demo"
	r := runSim(t, sim.RunOptions{ClusterFile: dir + "/cluster.yaml", Manifests: []string{dir, examplesDir + "/nvidia", examplesDir + "/gang", examplesDir + "/rdma/gpu-nic-same-switch.yaml", examplesDir + "/ascend/npu-whole.yaml", examplesDir + "/cambricon/smlu.yaml"}})
	want := map[string]struct {
		nodePrefix string
		devices    int
	}{
		"finetune":       {"dgx-h100-", 2},
		"notebook":       {"dgx-a100-", 1},
		"inference":      {"dgx-h100-", 4},
		"preprocess":     {"", 0},
		"mig-inference":  {"dgx-a100-", 1},
		"shared-a":       {"dgx-h100-", 1},
		"shared-b":       {"dgx-h100-", 1},
		"tp2-restricted": {"dgx-", 2},
		"tp2-besteffort": {"dgx-", 2},
		"numa-pair":      {"dgx-", 2},
		"legacy-gpu-pod": {"dgx-", 1},
		"mixed-sharing":  {"dgx-", 2},
		// The whole GPU and the MIG slice of one claim: MIG is dynamic on
		// the A100 only.
		"trainer-with-sidecar": {"dgx-a100-", 2},
		// A GPU and the NIC on its PCIe switch.
		"gpudirect-worker": {"dgx-h100-", 2},
		// Two Ascend 910B NPUs of one HCCS pair.
		"npu-trainer": {"atlas-a2-", 2},
		// A dynamic sMLU of 10 % and 1Gi of an MLU370 card.
		"test-cambricon-partial": {"mlu370-", 1},
	}
	for i := 0; i < 4; i++ {
		want[fmt.Sprintf("notebook-%d", i)] = struct {
			nodePrefix string
			devices    int
		}{"dgx-", 1}
	}
	for i := 0; i < 8; i++ {
		want[fmt.Sprintf("training-job-worker-%d", i)] = struct {
			nodePrefix string
			devices    int
		}{"dgx-h100-", 2}
	}
	if len(r.Pods) != len(want) {
		t.Errorf("report has %d pods, want %d", len(r.Pods), len(want))
	}
	for _, p := range r.Pods {
		w, ok := want[p.Name]
		if !ok {
			t.Errorf("unexpected pod %s", p.Name)
			continue
		}
		if p.Phase != "Running" || !strings.HasPrefix(p.Node, w.nodePrefix) {
			t.Errorf("pod %s: %s on %q, want Running on %s*", p.Name, p.Phase, p.Node, w.nodePrefix)
		}
		got := 0
		for _, c := range p.Claims {
			for _, d := range c.Devices {
				got++
				vendorOK := d.Driver == nvidia.DriverName || p.Name == "gpudirect-worker" && d.Driver == rdma.DriverName || p.Name == "npu-trainer" && d.Driver == ascend.DriverName || p.Name == "test-cambricon-partial" && d.Driver == cambricon.DriverName
				if !vendorOK || d.Pool != p.Node {
					t.Errorf("pod %s: device %+v not from its node's GPUs", p.Name, d)
				}
			}
		}
		if got != w.devices {
			t.Errorf("pod %s has %d devices, want %d", p.Name, got, w.devices)
		}
		if p.Name == "gpudirect-worker" && (len(p.Claims) != 1 || len(p.Claims[0].Matched) != 1 || !strings.HasPrefix(p.Claims[0].Matched[0], "topology.strata.sh/pcieSwitch=0000:")) {
			t.Errorf("gpudirect-worker claims %+v, want the GPU and NIC shown on one PCIe switch", p.Claims)
		}
	}
	// The gang runs whole inside one block.
	if len(r.Gangs) != 1 || r.Gangs[0].Running != 8 || len(r.Gangs[0].Domains) != 2 || strings.Contains(r.Gangs[0].Domains[1], "+") {
		t.Errorf("gangs in the report: %+v, want training-job running 8 pods in one block", r.Gangs)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func stringAttr(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func intAttr(d resourceapi.Device, name string) int64 {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

func versionAttr(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.VersionValue != nil {
		return *a.VersionValue
	}
	return ""
}
