package e2e

import (
	"fmt"
	"slices"
	"testing"
)

// halfShareAndWholeNode is a claim template for half of one GPU's cores
// and memory and one for all eight GPUs of a node.
const halfShareAndWholeNode = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: half-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: nvidia-shared.strata.sh
          capacity:
            requests:
              cores: "50"
              memory: 40Gi
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: eight-gpus
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: nvidia-gpu.strata.sh
          count: 8
`

// fragmentationPod is a pod filled in with its name, its scheduler and
// the claim template it uses.
const fragmentationPod = `
apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  schedulerName: %s
  containers:
  - name: cuda
    image: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
    resources:
      requests:
        cpu: "2"
        memory: 4Gi
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: %s
`

// TestSharesGoBesideSharesNotOntoWholeNodes: with the shipped profile, a
// second half-GPU share goes onto the GPU the first one half fills,
// instead of breaking the eight whole GPUs of the other node, once the
// scheduler has seen pods that need a whole node (StrataFragmentation).
// kube-scheduler's default scores, which prefer the node with less CPU
// and memory requested, put it on the other node: the default-scheduler
// profile on the same cluster shows it.
func TestSharesGoBesideSharesNotOntoWholeNodes(t *testing.T) {
	e := startCluster(t, twoGPUNodes)
	if err := e.applyYAML("templates", halfShareAndWholeNode); err != nil {
		t.Fatal(err)
	}
	run := func(name, scheduler, template string) (node string, gpus []string) {
		t.Helper()
		if err := e.applyYAML(name, fmt.Sprintf(fragmentationPod, name, scheduler, template)); err != nil {
			t.Fatal(err)
		}
		pod := e.waitRunning("default", name)
		return pod.Spec.NodeName, gpuNodes(e.sim.Nodes.Containers(pod.UID)["cuda"].DeviceNodes)
	}

	// A job that takes a whole node has been seen: the expected mix
	// holds whole nodes, which a share on an untouched node breaks.
	if _, gpus := run("trainer", "strata-scheduler", "eight-gpus"); len(gpus) != 8 {
		t.Fatalf("the 8-GPU pod sees %v", gpus)
	}
	e.deletePod("default", "trainer")

	firstNode, firstGPU := run("share-0", "strata-scheduler", "half-gpu")
	secondNode, secondGPU := run("share-1", "strata-scheduler", "half-gpu")
	if len(firstGPU) != 1 || secondNode != firstNode || !slices.Equal(secondGPU, firstGPU) {
		t.Fatalf("share-1 runs on %s seeing %v; want it beside share-0 on %s, seeing its GPU %v\n%s",
			secondNode, secondGPU, firstNode, firstGPU, e.describePods("default", "share-0", "share-1"))
	}
	e.deletePod("default", "share-0")
	e.deletePod("default", "share-1")

	// The same two shares through kube-scheduler's default profile.
	plainFirst, _ := run("plain-0", "default-scheduler", "half-gpu")
	plainSecond, _ := run("plain-1", "default-scheduler", "half-gpu")
	if plainSecond == plainFirst {
		t.Errorf("default-scheduler put both shares on %s; its default scores should spread them (the case above would then not show the plugin)", plainFirst)
	}
}
