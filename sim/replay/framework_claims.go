package replay

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/strata-sh/strata/drivers/nvidia"
)

// Classes of the chart that replayed claims ask for.
const (
	wholeGPUClass  = "nvidia-gpu.strata.sh"
	sharedGPUClass = "nvidia-shared.strata.sh"
)

// replayNamespace holds every replayed pod and claim.
const replayNamespace = "default"

// claimRequest is the name of a replayed claim's one request.
const claimRequest = "gpu"

// podObject is the i-th pod of a sample: the trace's CPU and memory as
// requests of one container, and for a GPU pod the claim claimObject
// makes, referenced by name.
func podObject(i int, p TracePod) *corev1.Pod {
	name := "pod-" + strconv.Itoa(i)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: replayNamespace, UID: types.UID(name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(p.CPU, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(p.Memory<<20, resource.BinarySI),
			}},
		}}},
	}
	if p.GPUs > 0 {
		claim := claimName(i)
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: claimRequest, ResourceClaimName: &claim}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: claimRequest}}
	}
	return pod
}

func claimName(i int) string { return "claim-" + strconv.Itoa(i) }

// claimObject is the claim of the i-th pod of a sample, nil for a pod
// without GPUs.
//
// Whole GPUs ask nvidia-gpu.strata.sh for GPUs devices and no capacity:
// the device's defaults take all of a GPU's memory, so no share fits
// beside them. A share asks nvidia-shared.strata.sh for one GPU's
// capacity: cores (percent of the GPU) = milli/10, rounded up, and
// memory = milli/1000 of the smallest memory among the models the pod
// accepts, in whole MiB, rounded down. gpu_milli is one fraction of a
// GPU whatever its model, and so is this request: cores bind before
// memory on every model (a model's shares sum to at most 100 % of its
// cores, and so to at most its smallest accepted memory), so a share
// fits wherever its fraction of the GPU is free, as in the trace. One
// request, not one firstAvailable subrequest per model: a pod that
// accepts several models prefers none of them, where kube-scheduler's
// DynamicResources score would favour the nodes of an earlier
// subrequest (by up to 150 of its points at weight 2), and the
// allocator would evaluate every earlier subrequest's selector on a
// node's devices first.
func claimObject(i int, p TracePod, c *Cluster) (*resourceapi.ResourceClaim, error) {
	if p.GPUs == 0 {
		return nil, nil
	}
	models := c.Models
	accepted := acceptedModels(p.Models, c.ModelOrder)
	req := resourceapi.DeviceRequest{Name: claimRequest}
	var selectors []resourceapi.DeviceSelector
	if len(p.Models) > 0 && len(accepted) > 0 {
		selectors = []resourceapi.DeviceSelector{productSelector(accepted, models)}
	}
	if len(accepted) == 0 {
		// The pod accepts no model the cluster has: a claim no device
		// satisfies, so the scheduler finds no node for it.
		req.Exactly = &resourceapi.ExactDeviceRequest{
			DeviceClassName: wholeGPUClass,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           int64(p.GPUs),
			Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "false"}}},
		}
	} else if p.Milli >= 1000 {
		req.Exactly = &resourceapi.ExactDeviceRequest{
			DeviceClassName: wholeGPUClass,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           int64(p.GPUs),
			Selectors:       selectors,
		}
	} else {
		if p.GPUs != 1 {
			return nil, fmt.Errorf("pod %s: a share of %d GPUs", p.Name, p.GPUs)
		}
		memMiB := int64(math.MaxInt64)
		for _, name := range accepted {
			memMiB = min(memMiB, models[name].MemoryMiB)
		}
		cores := (int64(p.Milli) + 9) / 10
		mem := max(int64(p.Milli)*memMiB/1000, 1)
		req.Exactly = &resourceapi.ExactDeviceRequest{
			DeviceClassName: sharedGPUClass,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           1,
			Selectors:       selectors,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				"cores":  *resource.NewQuantity(cores, resource.DecimalSI),
				"memory": *resource.NewQuantity(mem<<20, resource.BinarySI),
			}},
		}
	}
	name := claimName(i)
	return &resourceapi.ResourceClaim{
		// The assume cache orders claim versions by resourceVersion.
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: replayNamespace, UID: types.UID(name), ResourceVersion: "1"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}, nil
}

// acceptedModels returns the cluster's models a pod accepts (gpu_spec;
// all of them when it names none), in the cluster's order. Models the
// cluster does not have are left out: no device would match them.
func acceptedModels(spec []string, order []string) []string {
	if len(spec) == 0 {
		return order
	}
	var out []string
	for _, name := range order {
		if slices.Contains(spec, name) {
			out = append(out, name)
		}
	}
	return out
}

// productSelector selects the devices of some GPU models by the product
// name the NVIDIA plugin publishes.
func productSelector(names []string, models map[string]GPUModel) resourceapi.DeviceSelector {
	attr := `device.attributes["` + nvidia.DriverName + `"].productName`
	var expr string
	if len(names) == 1 {
		expr = attr + " == " + strconv.Quote(models[names[0]].ProductName)
	} else {
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = strconv.Quote(models[n].ProductName)
		}
		expr = attr + " in [" + strings.Join(quoted, ", ") + "]"
	}
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}
