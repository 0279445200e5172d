package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/strata-sh/strata/drivers/nvidia"
)

// An H100 node whose MIG manager split GPUs 0 and 1 into two 3g.40gb
// instances each before the plugin started (static MIG, the default).
const operatorMIGNode = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: h100
  count: 1
  hardware: nvidia-dgx-h100
  migConfig:
  - devices: [0, 1]
    migDevices: {"3g.40gb": 2}
`

const migClass = "nvidia-mig.strata.sh"

// migPod creates a pod whose claim asks for one MIG device of a profile.
func (e *env) migPod(name, profile string) {
	e.t.Helper()
	e.oneDevicePod(name, "mig", migClass, fmt.Sprintf(`device.attributes["nvidia.strata.sh"].profile == %q`, profile))
}

// TestStaticMIGKeepsTheOperatorsLayout: the instances the operator made
// are published, allocated and prepared as they are; the GPUs in MIG mode
// are not offered whole; nothing is created or destroyed, and MIG mode is
// not touched, across a plugin restart, a whole-GPU claim on another GPU
// and the MIG pod's deletion.
func TestStaticMIGKeepsTheOperatorsLayout(t *testing.T) {
	e := startCluster(t, operatorMIGNode)
	const nodeName = "h100-0"
	hw := e.hardware(nodeName)
	layout := func() []int { return hw.NVML.MIGInstances()[:2] }
	if got := layout(); !slices.Equal(got, []int{2, 2}) {
		t.Fatalf("operator's layout %v, want two instances on GPUs 0 and 1", got)
	}
	var gpus map[string]resourceapi.Device
	e.eventually(30*time.Second, "the 4 instances and the 6 GPUs outside MIG mode published", func(context.Context) (bool, error) {
		gpus = e.devicesOf(nodeName, nvidia.DriverName, "gpu")
		return len(e.devicesOf(nodeName, nvidia.DriverName, "mig")) == 4 && len(gpus) == 6, nil
	})
	if _, ok := gpus["gpu-0"]; ok {
		t.Errorf("gpu-0 is in MIG mode but offered whole")
	}

	e.migPod("inference", "3g.40gb")
	pod := e.waitRunning("default", "inference")
	dev := e.claimResults(pod, "mig")[0].Device
	if !strings.HasPrefix(dev, "gpu-0-mig-3g40gb-") && !strings.HasPrefix(dev, "gpu-1-mig-3g40gb-") {
		t.Fatalf("MIG pod got %s, want one of the operator's instances", dev)
	}
	caps := slices.DeleteFunc(slices.Clone(e.sim.Nodes.Containers(pod.UID)["main"].DeviceNodes), func(p string) bool { return !strings.HasPrefix(p, "/dev/nvidia-caps/") })
	if len(caps) != 2 {
		t.Errorf("MIG container capabilities %v, want its instance's two", caps)
	}

	if err := e.node(nodeName).RestartPlugin(e.ctx, nvidia.DriverName); err != nil {
		t.Fatal(err)
	}
	e.pinnedGPU("whole", hw.NVML.Device(2).UUID)
	e.waitRunning("default", "whole")
	e.deletePod("default", "inference")
	e.eventually(30*time.Second, "MIG claim unprepared", func(context.Context) (bool, error) {
		return len(e.checkpointClaims(nodeName, nvidia.DriverName)) == 1, nil
	})
	if got := layout(); !slices.Equal(got, []int{2, 2}) {
		t.Errorf("layout after restart, whole-GPU claim and unprepare %v, want the operator's", got)
	}
	for i := 0; i < 2; i++ {
		if mode, _, _ := hw.NVML.Device(i).GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
			t.Errorf("GPU %d left MIG mode", i)
		}
	}
	// The freed instance is allocatable again.
	e.migPod("again", "3g.40gb")
	e.waitRunning("default", "again")
}

// TestDynamicMIGOwnsOnlyWhatItMade: with dynamic MIG an instance is
// created for the claim and destroyed with it; an instance an operator
// made meanwhile is never destroyed — not by a plugin restart, not at
// unprepare — and the placements it overlaps stop being offered.
func TestDynamicMIGOwnsOnlyWhatItMade(t *testing.T) {
	e := startCluster(t, oneH100MIGNode)
	const nodeName = "h100-0"
	hw := e.hardware(nodeName)
	e.migPod("inference", "1g.10gb")
	pod := e.waitRunning("default", "inference")
	dev := e.claimResults(pod, "mig")[0].Device
	var mine int
	fmt.Sscanf(dev, "gpu-%d-", &mine)
	if got := hw.NVML.MIGInstances()[mine]; got != 1 {
		t.Fatalf("GPU %d has %d instances for the claim, want 1", mine, got)
	}
	foreign := (mine + 5) % 8
	if err := hw.NVML.ApplyMIGConfig(foreign, map[string]int{"4g.40gb": 1}); err != nil {
		t.Fatal(err)
	}
	overlapped := fmt.Sprintf("gpu-%d-mig-3g40gb-0", foreign)
	e.eventually(30*time.Second, "placements under the operator's instance withdrawn", func(context.Context) (bool, error) {
		_, ok := e.devicesOf(nodeName, nvidia.DriverName, "mig")[overlapped]
		return !ok, nil
	})
	if err := e.node(nodeName).RestartPlugin(e.ctx, nvidia.DriverName); err != nil {
		t.Fatal(err)
	}
	if got := hw.NVML.MIGInstances(); got[mine] != 1 || got[foreign] != 1 {
		t.Errorf("instances after restart %v, want the claim's on GPU %d and the operator's on GPU %d", got, mine, foreign)
	}
	// What the node offers now is what the restarted plugin publishes:
	// delete the slices and wait for it to publish them again.
	if err := e.client.ResourceV1().ResourceSlices().DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + nodeName + ",spec.driver=" + nvidia.DriverName,
	}); err != nil {
		t.Fatal(err)
	}
	untouched := fmt.Sprintf("gpu-%d-mig-3g40gb-0", (mine+1)%8)
	e.eventually(time.Minute, "the restarted plugin publishes the node's placements", func(context.Context) (bool, error) {
		_, ok := e.devicesOf(nodeName, nvidia.DriverName, "mig")[untouched]
		return ok, nil
	})
	if _, ok := e.devicesOf(nodeName, nvidia.DriverName, "mig")[overlapped]; ok {
		t.Errorf("%s offered again after restart although the operator's instance holds its slices", overlapped)
	}
	e.deletePod("default", "inference")
	e.eventually(30*time.Second, "the claim's instance destroyed", func(context.Context) (bool, error) {
		return hw.NVML.MIGInstances()[mine] == 0, nil
	})
	if got := hw.NVML.MIGInstances()[foreign]; got != 1 {
		t.Errorf("operator's instance count on GPU %d = %d after unprepare, want 1", foreign, got)
	}
}
