package sim

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/strata-sh/strata/sim/apply"
)

// TestForRealNodes: every pod template (a Pod's, a Deployment's, a
// CronJob's) runs the probe in busybox on the host network without CPU
// and memory requests; claims and other resources stay; the input is not
// changed.
func TestForRealNodes(t *testing.T) {
	objs, err := apply.Decode([]byte(`apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers:
  - {name: init, image: alpine, command: [setup]}
  containers:
  - name: main
    image: nvcr.io/nvidia/pytorch:24.05
    args: [train.py]
    readinessProbe: {httpGet: {port: 8080}}
    resources:
      requests: {cpu: "16", memory: 64Gi, nvidia.com/gpu: "1"}
      limits: {memory: 64Gi}
      claims: [{name: gpu}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers: [{name: web, image: nginx}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: c}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: job, image: python}]
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	out := forRealNodes(objs)
	if img, _, _ := unstructured.NestedString(objs[0].Object, "spec", "containers", "0", "image"); img == "busybox" {
		t.Error("the input objects were changed")
	}
	specs := map[string][]string{"p": {"spec"}, "d": {"spec", "template", "spec"}, "c": {"spec", "jobTemplate", "spec", "template", "spec"}}
	for _, o := range out {
		spec, _, _ := unstructured.NestedMap(o.Object, specs[o.GetName()]...)
		if spec["hostNetwork"] != true {
			t.Errorf("%s: not on the host network", o.GetName())
		}
		for _, key := range []string{"initContainers", "containers"} {
			list, _ := spec[key].([]any)
			for _, c := range list {
				m := c.(map[string]any)
				cmd, _ := m["command"].([]any)
				if m["image"] != "busybox" || len(cmd) != 3 || m["args"] != nil || m["readinessProbe"] != nil {
					t.Errorf("%s/%s: %v, want the probe in busybox", o.GetName(), m["name"], m)
				}
			}
		}
	}
	containers, _, _ := unstructured.NestedSlice(out[0].Object, "spec", "containers")
	r := containers[0].(map[string]any)["resources"].(map[string]any)
	if req := r["requests"].(map[string]any); req["cpu"] != nil || req["memory"] != nil || req["nvidia.com/gpu"] != "1" {
		t.Errorf("requests %v, want only the GPU", req)
	}
	if claims, _ := r["claims"].([]any); len(claims) != 1 {
		t.Errorf("the container's claims went: %v", r)
	}
}

// TestParseProbe: what a container printed, less what every container
// has; nothing until the probe finished.
func TestParseProbe(t *testing.T) {
	out := "dev /dev/full\ndev /dev/nvidia0\ndev /dev/nvidiactl\ndev /dev/pts/0\nenv NVIDIA_VISIBLE_DEVICES=void\n" +
		"mount /\nmount /proc\nmount /usr/local/vgpu/libvgpu.so\nmount /sys/fs/cgroup/cpu\nmount /etc/hosts\n"
	if _, ok := ParseProbe(out); ok {
		t.Error("an unfinished probe counts as seen")
	}
	c, ok := ParseProbe(out + "probed\n")
	if !ok || !c.Observed {
		t.Fatal("a finished probe is not seen")
	}
	if !slices.Equal(c.DeviceNodes, []string{"/dev/nvidia0", "/dev/nvidiactl"}) || !slices.Equal(c.Env, []string{"NVIDIA_VISIBLE_DEVICES=void"}) ||
		!slices.Equal(c.Mounts, []string{"/usr/local/vgpu/libvgpu.so"}) {
		t.Errorf("parsed %+v", c)
	}
}
