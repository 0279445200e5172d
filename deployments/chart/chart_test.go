package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/deployments"
	"github.com/strata-sh/strata/drivers/accelerator"
)

// objects decodes every document of the rendered manifests.
func objects(t *testing.T, r *Rendered) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, m := range r.All() {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(m.Content), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				require.ErrorContains(t, err, "EOF", m.Name)
				break
			}
			if len(u.Object) == 0 {
				continue
			}
			require.NotEmpty(t, u.GetKind(), "%s: a document without kind", m.Name)
			out = append(out, u)
		}
	}
	return out
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// schedulerConfig returns the scheduler ConfigMap's configuration, raw
// and parsed, and the shipped configuration parsed.
func schedulerConfig(t *testing.T, objs []*unstructured.Unstructured) (data string, cfg, shipped map[string]any) {
	t.Helper()
	cm := find(objs, "ConfigMap", "strata-scheduler-config")
	require.NotNil(t, cm)
	data, _, _ = unstructured.NestedString(cm.Object, "data", "config.yaml")
	require.NoError(t, yaml.Unmarshal([]byte(data), &cfg))
	require.NoError(t, yaml.Unmarshal(deployments.SchedulerConfig(), &shipped))
	return data, cfg, shipped
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.GetKind()]++
	}
	return out
}

func TestRenderDefaults(t *testing.T) {
	r, err := Render(DefaultRelease, nil)
	require.NoError(t, err)
	objs := objects(t, r)
	got := kinds(objs)
	assert.Equal(t, 2, got["CustomResourceDefinition"])
	assert.Equal(t, 4, got["DeviceClass"], "accelerator plus the three NVIDIA classes")
	assert.Equal(t, 2, got["Deployment"], "scheduler and controller")
	assert.Equal(t, 1, got["DaemonSet"], "the NVIDIA plugin")
	assert.Equal(t, 4, got["ValidatingAdmissionPolicy"], "node-restricted slices and MPS pods, gang annotations, single allocator")
	assert.Equal(t, 4, got["ValidatingAdmissionPolicyBinding"])
	assert.Equal(t, 1, got["ValidatingWebhookConfiguration"])
	assert.Equal(t, 1, got["MutatingWebhookConfiguration"], "pod routing")
	assert.Equal(t, 3, got["ServiceAccount"])
	assert.Equal(t, 2, got["FlowSchema"], "components at workload-high, plugins at system")

	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "DeviceClass" || o.GetKind() == "FlowSchema" || strings.HasPrefix(o.GetKind(), "Cluster") || strings.HasPrefix(o.GetKind(), "Validating") || strings.HasPrefix(o.GetKind(), "Mutating") {
			continue
		}
		if o.GetName() == "strata-scheduler-authentication-reader" {
			assert.Equal(t, "kube-system", o.GetNamespace())
			continue
		}
		assert.Equal(t, "strata-system", o.GetNamespace(), "%s %s", o.GetKind(), o.GetName())
	}

	// The scheduler runs the shipped profiles, elected in the release
	// namespace.
	_, cfg, shipped := schedulerConfig(t, objs)
	// Only Strata's profile: a cluster has its own default-scheduler.
	profiles, _ := cfg["profiles"].([]any)
	require.Len(t, profiles, 1)
	assert.Equal(t, "strata-scheduler", profiles[0].(map[string]any)["schedulerName"])
	assert.Equal(t, shipped["profiles"].([]any)[0], profiles[0])
	assert.Equal(t, map[string]any{"leaderElect": true, "resourceName": "strata-scheduler", "resourceNamespace": "strata-system"}, cfg["leaderElection"])

	// A 1.37 cluster serves DeviceTaintRules; an older one gets the
	// scheduler with that feature off, or it would wait for them forever.
	raw, err := yaml.Marshal(find(objs, "Deployment", "strata-scheduler").Object)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "DRADeviceTaintRules")
	old, err := Render(Release{Name: "strata", Namespace: "strata-system", KubeVersion: "v1.35.4"}, nil)
	require.NoError(t, err)
	raw, err = yaml.Marshal(find(objects(t, old), "Deployment", "strata-scheduler").Object)
	require.NoError(t, err)
	assert.Contains(t, string(raw), "--feature-gates=DRADeviceTaintRules=false")

	// The plugin's identity and its node come from the downward API; its
	// host paths are the kubelet's.
	ds := find(objs, "DaemonSet", "strata-nvidia-kubelet-plugin")
	require.NotNil(t, ds)
	sa, _, _ := unstructured.NestedString(ds.Object, "spec", "template", "spec", "serviceAccountName")
	assert.Equal(t, "strata-nvidia-kubelet-plugin", sa)
	raw, err = yaml.Marshal(ds.Object)
	require.NoError(t, err)
	for _, want := range []string{"--plugin-data-dir=/var/lib/kubelet/plugins/nvidia.strata.sh", "--registrar-dir=/var/lib/kubelet/plugins_registry", "fieldPath: spec.nodeName", "fieldPath: metadata.uid", "maxSurge: 1", "maxUnavailable: 0", "--dev-root=/", "--nvml-library=/driver-root/"} {
		assert.Contains(t, string(raw), want)
	}
	assert.NotContains(t, string(raw), "LD_LIBRARY_PATH", "the plugin must not load the host's libc")
	for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		command, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), probe, "exec", "command")
		assert.Equal(t, []string{"/usr/bin/nvidia-kubelet-plugin", "probe", "--plugin-data-dir=/var/lib/kubelet/plugins/nvidia.strata.sh"}, command, probe)
	}
	args := containerArgs(t, ds)
	assert.Contains(t, args, "--health-interval=5s")
	assert.Contains(t, args, "--metrics-address=:9401")
	hostNetwork, _, _ := unstructured.NestedBool(ds.Object, "spec", "template", "spec", "hostNetwork")
	assert.False(t, hostNetwork, "the NVIDIA plugin runs in the pod network")
	ports, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	assert.Contains(t, ports[0].(map[string]any), "ports", "the NVIDIA plugin declares its metrics port")

	// NICs are opt-in: no RDMA plugin, classes or policy entry by default.
	assert.Nil(t, find(objs, "DaemonSet", "strata-rdma-kubelet-plugin"))
	assert.Nil(t, find(objs, "ServiceAccount", "strata-rdma-kubelet-plugin"))
	assert.Nil(t, find(objs, "DeviceClass", "rdma-nic.strata.sh"))
	assert.Nil(t, find(objs, "DeviceClass", "rdma-vf.strata.sh"))
	// NPUs too: no Ascend plugin, classes or policy entry by default.
	assert.Nil(t, find(objs, "DaemonSet", "strata-ascend-kubelet-plugin"))
	assert.Nil(t, find(objs, "ServiceAccount", "strata-ascend-kubelet-plugin"))
	assert.Nil(t, find(objs, "DeviceClass", "ascend-npu.strata.sh"))
	assert.Nil(t, find(objs, "DeviceClass", "ascend-vnpu.strata.sh"))
	// MLUs too: no Cambricon plugin, classes or policy entry by default.
	assert.Nil(t, find(objs, "DaemonSet", "strata-cambricon-kubelet-plugin"))
	assert.Nil(t, find(objs, "ServiceAccount", "strata-cambricon-kubelet-plugin"))
	assert.Nil(t, find(objs, "DeviceClass", "cambricon-mlu.strata.sh"))
	assert.Nil(t, find(objs, "DeviceClass", "cambricon-smlu.strata.sh"))

	// The slice policy names the plugin's service account and driver.
	vap := find(objs, "ValidatingAdmissionPolicy", "strata-node-restricted-slices")
	require.NotNil(t, vap)
	raw, err = yaml.Marshal(vap.Object)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `system:serviceaccount:strata-system:strata-nvidia-kubelet-plugin`)
	assert.Contains(t, string(raw), `nvidia.strata.sh`)
	assert.NotContains(t, string(raw), `rdma`)
	assert.NotContains(t, string(raw), `ascend`)
	assert.NotContains(t, string(raw), `cambricon`)

	// One scheduler allocates Strata's devices: the policy lets only
	// strata-scheduler's service account, and the routing webhook sends
	// pods with claims or nvidia.com/gpu to it.
	vap = find(objs, "ValidatingAdmissionPolicy", "strata-single-allocator")
	require.NotNil(t, vap)
	raw, err = yaml.Marshal(vap.Object)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `request.userInfo.username in ["system:serviceaccount:strata-system:strata-scheduler"]`)
	routing := find(objs, "MutatingWebhookConfiguration", "strata-routing")
	require.NotNil(t, routing)
	raw, err = yaml.Marshal(routing.Object)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `r in ["nvidia.com/gpu"]`)
	assert.Contains(t, string(raw), `!= 'strata-scheduler'`)
	controllerArgs := containerArgs(t, find(objs, "Deployment", "strata-controller"))
	assert.Contains(t, controllerArgs, "--route-pods-to-scheduler=strata-scheduler")
	assert.Contains(t, controllerArgs, "--routing-webhook-config=strata-routing")
}

// containerArgs returns the args of a DaemonSet's only container.
func containerArgs(t *testing.T, ds *unstructured.Unstructured) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args
}

// policyDrivers returns the node-restricted-slices policy's map of
// plugin service account to driver.
func policyDrivers(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	vap := find(objs, "ValidatingAdmissionPolicy", "strata-node-restricted-slices")
	require.NotNil(t, vap)
	vars, _, _ := unstructured.NestedSlice(vap.Object, "spec", "variables")
	for _, v := range vars {
		v := v.(map[string]any)
		if v["name"] != "driver" {
			continue
		}
		expr := strings.TrimSpace(v["expression"].(string))
		expr = strings.TrimSuffix(expr, "[request.userInfo.username]")
		out := map[string]string{}
		require.NoError(t, json.Unmarshal([]byte(expr), &out), expr)
		return out
	}
	t.Fatal("the policy has no driver variable")
	return nil
}

// TestRenderValuesFiles renders every values file in the chart's ci/
// folder (one per vendor and feature toggle).
func TestRenderValuesFiles(t *testing.T) {
	files, err := filepath.Glob("../helm/strata/ci/*-values.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			values, err := ParseValues(raw)
			require.NoError(t, err)
			r, err := Render(Release{Name: "strata", Namespace: "gpu-system"}, values)
			require.NoError(t, err)
			objs := objects(t, r)
			switch filepath.Base(f) {
			case "no-webhook-values.yaml":
				assert.Zero(t, kinds(objs)["ValidatingWebhookConfiguration"])
				assert.Nil(t, find(objs, "Secret", "strata-controller-webhook-cert"))
			case "scheduler-only-values.yaml":
				assert.Zero(t, kinds(objs)["DaemonSet"])
				assert.Zero(t, kinds(objs)["DeviceClass"])
				data, _, _ := schedulerConfig(t, objs)
				assert.Contains(t, data, "percentageOfNodesToScore: 50")
				assert.Contains(t, data, "leaderElect: false")
			case "replace-default-scheduler-values.yaml":
				_, cfg, shipped := schedulerConfig(t, objs)
				assert.Equal(t, shipped["profiles"], cfg["profiles"])
			case "nvidia-dynamic-mig-values.yaml":
				ds := find(objs, "DaemonSet", "strata-nvidia-kubelet-plugin")
				require.NotNil(t, ds)
				raw, _ := yaml.Marshal(ds.Object)
				assert.Contains(t, string(raw), "--mig-mode=dynamic")
				assert.Contains(t, string(raw), "path: /run/nvidia/driver")
				assert.Contains(t, string(raw), "--fabric-partitions-file=/run/nvidia-fabricmanager/partitions.json")
				assert.Contains(t, containerArgs(t, ds), "--health-interval=10s")
			case "rdma-values.yaml":
				rdmaPlugin(t, objs)
			case "ascend-values.yaml":
				ascendPlugin(t, objs)
			case "cambricon-values.yaml":
				cambriconPlugin(t, objs)
			}
		})
	}
}

// rdmaPlugin checks what ci/rdma-values.yaml installs beside the
// defaults: the RDMA plugin on the host network with NET_ADMIN, its rail
// order, its DeviceClasses and its lines in the slice policy and the
// plugins' FlowSchema.
func rdmaPlugin(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	assert.NotNil(t, find(objs, "DaemonSet", "strata-nvidia-kubelet-plugin"), "the NVIDIA plugin stays")
	ds := find(objs, "DaemonSet", "strata-rdma-kubelet-plugin")
	require.NotNil(t, ds)
	pod, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	assert.Equal(t, true, pod["hostNetwork"], "VF settings are made in the host's network namespace")
	assert.Equal(t, "ClusterFirstWithHostNet", pod["dnsPolicy"])
	assert.Equal(t, "strata-rdma-kubelet-plugin", pod["serviceAccountName"])
	assert.Equal(t, map[string]any{"feature.node.kubernetes.io/rdma.available": "true"}, pod["nodeSelector"])
	assert.NotContains(t, pod, "tolerations")
	assert.Equal(t, "system-node-critical", pod["priorityClassName"])
	containers := pod["containers"].([]any)
	require.Len(t, containers, 1)
	c := containers[0].(map[string]any)
	assert.Equal(t, "ghcr.io/strata-sh/rdma-kubelet-plugin:"+chartAppVersion(t), c["image"])
	caps, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "add")
	assert.Equal(t, []string{"NET_ADMIN"}, caps)
	assert.NotContains(t, c, "ports", "on the host network a declared port is a host port, which blocks maxSurge")
	args := containerArgs(t, ds)
	for _, want := range []string{
		"--plugin-data-dir=/var/lib/kubelet/plugins/rdma.strata.sh",
		"--registrar-dir=/var/lib/kubelet/plugins_registry",
		"--cdi-dir=/var/run/cdi",
		"--metrics-address=:9402",
		"--dev-root=/",
		"--rail-devices=mlx5_0,mlx5_3",
		"--health-interval=5s",
	} {
		assert.Contains(t, args, want)
	}
	for _, a := range args {
		assert.NotContains(t, a, "nvml", "no NVIDIA flag reaches the RDMA plugin")
	}
	strategy, _, _ := unstructured.NestedMap(ds.Object, "spec", "updateStrategy", "rollingUpdate")
	assert.Equal(t, map[string]any{"maxSurge": float64(1), "maxUnavailable": float64(0)}, strategy)

	for class, kind := range map[string]string{"rdma-nic.strata.sh": "nic", "rdma-vf.strata.sh": "vf"} {
		dc := find(objs, "DeviceClass", class)
		if !assert.NotNil(t, dc, class) {
			continue
		}
		selectors, _, _ := unstructured.NestedSlice(dc.Object, "spec", "selectors")
		require.Len(t, selectors, 1)
		expr, _, _ := unstructured.NestedString(selectors[0].(map[string]any), "cel", "expression")
		assert.Equal(t, `device.driver == "rdma.strata.sh" && device.attributes["rdma.strata.sh"].type == "`+kind+`"`, expr)
		assert.Equal(t, "deviceclasses", dc.GetLabels()["app.kubernetes.io/component"])
	}

	assert.Equal(t, map[string]string{
		"system:serviceaccount:gpu-system:strata-nvidia-kubelet-plugin": "nvidia.strata.sh",
		"system:serviceaccount:gpu-system:strata-rdma-kubelet-plugin":   "rdma.strata.sh",
	}, policyDrivers(t, objs))
	fs := find(objs, "FlowSchema", "strata-kubelet-plugins")
	require.NotNil(t, fs)
	raw, _ := yaml.Marshal(fs.Object)
	assert.Contains(t, string(raw), "name: strata-rdma-kubelet-plugin")
}

// Without railDevices the plugin gets no --rail-devices and numbers the
// rails in PCI address order.
func TestRenderRDMAWithoutRailOrder(t *testing.T) {
	values, err := ParseValues([]byte("plugins:\n  rdma:\n    enabled: true\n"))
	require.NoError(t, err)
	r, err := Render(DefaultRelease, values)
	require.NoError(t, err)
	ds := find(objects(t, r), "DaemonSet", "strata-rdma-kubelet-plugin")
	require.NotNil(t, ds)
	for _, a := range containerArgs(t, ds) {
		assert.NotContains(t, a, "--rail-devices")
	}
}

// ascendPlugin checks what ci/ascend-values.yaml installs beside the
// defaults: the Ascend plugin in the pod network with the host's npu-smi
// and driver root mounted at their host paths, its health interval, its
// DeviceClasses and its lines in the slice policy and the plugins'
// FlowSchema.
func ascendPlugin(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	assert.NotNil(t, find(objs, "DaemonSet", "strata-nvidia-kubelet-plugin"), "the NVIDIA plugin stays")
	ds := find(objs, "DaemonSet", "strata-ascend-kubelet-plugin")
	require.NotNil(t, ds)
	pod, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	assert.NotContains(t, pod, "hostNetwork", "the Ascend plugin runs in the pod network")
	assert.Equal(t, "strata-ascend-kubelet-plugin", pod["serviceAccountName"])
	assert.Equal(t, map[string]any{"accelerator": "huawei-Ascend910"}, pod["nodeSelector"])
	assert.NotContains(t, pod, "tolerations")
	assert.Equal(t, "system-node-critical", pod["priorityClassName"])
	containers := pod["containers"].([]any)
	require.Len(t, containers, 1)
	c := containers[0].(map[string]any)
	assert.Equal(t, "ghcr.io/strata-sh/ascend-kubelet-plugin:"+chartAppVersion(t), c["image"])
	privileged, _, _ := unstructured.NestedBool(c, "securityContext", "privileged")
	assert.True(t, privileged, "npu-smi creates and destroys vNPUs")
	assert.NotContains(t, c["securityContext"], "capabilities")
	assert.Equal(t, []any{map[string]any{"name": "metrics", "containerPort": float64(9403)}}, c["ports"])
	args := containerArgs(t, ds)
	for _, want := range []string{
		"--plugin-data-dir=/var/lib/kubelet/plugins/ascend.strata.sh",
		"--registrar-dir=/var/lib/kubelet/plugins_registry",
		"--cdi-dir=/var/run/cdi",
		"--metrics-address=:9403",
		"--dev-root=/",
		"--npu-smi=/usr/local/bin/npu-smi",
		"--vendor-tool-timeout=30s",
		"--health-interval=30s",
		"--driver-root=/usr/local/Ascend/driver",
		"--dcmi-dir=/usr/local/dcmi",
	} {
		assert.Contains(t, args, want)
	}
	for _, a := range args {
		assert.NotContains(t, a, "nvml", "no NVIDIA flag reaches the Ascend plugin")
		assert.NotContains(t, a, "rail", "no RDMA flag reaches the Ascend plugin")
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	assert.Contains(t, mounts, map[string]any{"name": "driver-root", "mountPath": "/usr/local/Ascend/driver", "readOnly": true})
	assert.Contains(t, mounts, map[string]any{"name": "npu-smi", "mountPath": "/usr/local/bin/npu-smi", "readOnly": true})
	volumes, _, _ := unstructured.NestedSlice(pod, "volumes")
	assert.Contains(t, volumes, map[string]any{"name": "driver-root", "hostPath": map[string]any{"path": "/usr/local/Ascend/driver", "type": "Directory"}})
	assert.Contains(t, volumes, map[string]any{"name": "npu-smi", "hostPath": map[string]any{"path": "/usr/local/bin/npu-smi", "type": "File"}})
	strategy, _, _ := unstructured.NestedMap(ds.Object, "spec", "updateStrategy", "rollingUpdate")
	assert.Equal(t, map[string]any{"maxSurge": float64(1), "maxUnavailable": float64(0)}, strategy)

	for class, kind := range map[string]string{"ascend-npu.strata.sh": "npu", "ascend-vnpu.strata.sh": "vnpu"} {
		dc := find(objs, "DeviceClass", class)
		if !assert.NotNil(t, dc, class) {
			continue
		}
		selectors, _, _ := unstructured.NestedSlice(dc.Object, "spec", "selectors")
		require.Len(t, selectors, 1)
		expr, _, _ := unstructured.NestedString(selectors[0].(map[string]any), "cel", "expression")
		assert.Equal(t, `device.driver == "ascend.strata.sh" && device.attributes["ascend.strata.sh"].type == "`+kind+`"`, expr)
		assert.Equal(t, "deviceclasses", dc.GetLabels()["app.kubernetes.io/component"])
	}

	assert.Equal(t, map[string]string{
		"system:serviceaccount:gpu-system:strata-nvidia-kubelet-plugin": "nvidia.strata.sh",
		"system:serviceaccount:gpu-system:strata-ascend-kubelet-plugin": "ascend.strata.sh",
	}, policyDrivers(t, objs))
	fs := find(objs, "FlowSchema", "strata-kubelet-plugins")
	require.NotNil(t, fs)
	raw, _ := yaml.Marshal(fs.Object)
	assert.Contains(t, string(raw), "name: strata-ascend-kubelet-plugin")
}

// A driver installed elsewhere: both host paths are mounted where they are
// on the host and --npu-smi names the program's.
func TestRenderAscendDriverPaths(t *testing.T) {
	values, err := ParseValues([]byte("plugins:\n  ascend:\n    enabled: true\n    driver:\n      root: /opt/Ascend/driver\n      npuSmi: /usr/local/sbin/npu-smi\n"))
	require.NoError(t, err)
	r, err := Render(DefaultRelease, values)
	require.NoError(t, err)
	ds := find(objects(t, r), "DaemonSet", "strata-ascend-kubelet-plugin")
	require.NotNil(t, ds)
	assert.Contains(t, containerArgs(t, ds), "--npu-smi=/usr/local/sbin/npu-smi")
	assert.Contains(t, containerArgs(t, ds), "--driver-root=/opt/Ascend/driver")
	pod, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	mounts, _, _ := unstructured.NestedSlice(pod["containers"].([]any)[0].(map[string]any), "volumeMounts")
	assert.Contains(t, mounts, map[string]any{"name": "driver-root", "mountPath": "/opt/Ascend/driver", "readOnly": true})
	assert.Contains(t, mounts, map[string]any{"name": "npu-smi", "mountPath": "/usr/local/sbin/npu-smi", "readOnly": true})
	volumes, _, _ := unstructured.NestedSlice(pod, "volumes")
	assert.Contains(t, volumes, map[string]any{"name": "driver-root", "hostPath": map[string]any{"path": "/opt/Ascend/driver", "type": "Directory"}})
	assert.Contains(t, volumes, map[string]any{"name": "npu-smi", "hostPath": map[string]any{"path": "/usr/local/sbin/npu-smi", "type": "File"}})
}

// TestRenderVendorToolTimeout: plugins.ascend/cambricon.driver.vendorToolTimeout
// is each plugin's --vendor-tool-timeout; one that is not a positive
// duration is refused by the schema.
func TestRenderVendorToolTimeout(t *testing.T) {
	values, err := ParseValues([]byte("plugins:\n  ascend:\n    enabled: true\n    driver:\n      vendorToolTimeout: 2m\n  cambricon:\n    enabled: true\n    driver:\n      vendorToolTimeout: 45s\n"))
	require.NoError(t, err)
	r, err := Render(DefaultRelease, values)
	require.NoError(t, err)
	objs := objects(t, r)
	assert.Contains(t, containerArgs(t, find(objs, "DaemonSet", "strata-ascend-kubelet-plugin")), "--vendor-tool-timeout=2m")
	assert.Contains(t, containerArgs(t, find(objs, "DaemonSet", "strata-cambricon-kubelet-plugin")), "--vendor-tool-timeout=45s")
	for _, bad := range []string{"0s", "30", "forever"} {
		values, err := ParseValues([]byte("plugins:\n  cambricon:\n    enabled: true\n    driver:\n      vendorToolTimeout: " + bad + "\n"))
		require.NoError(t, err)
		_, err = Render(DefaultRelease, values)
		assert.ErrorContains(t, err, "vendorToolTimeout", bad)
	}
}

// TestRenderSMLUSyntax: plugins.cambricon.driver.smlu sets the arguments
// of cnmon's sMLU commands; a template lacking a value it must carry is
// refused by the schema.
func TestRenderSMLUSyntax(t *testing.T) {
	values, err := ParseValues([]byte("plugins:\n  cambricon:\n    enabled: true\n    driver:\n      smlu:\n        createArgs: \"dsmlu add -c {card} -q {vcore} -m {memoryMiB}\"\n"))
	require.NoError(t, err)
	r, err := Render(DefaultRelease, values)
	require.NoError(t, err)
	args := containerArgs(t, find(objects(t, r), "DaemonSet", "strata-cambricon-kubelet-plugin"))
	assert.Contains(t, args, "--smlu-create-args=dsmlu add -c {card} -q {vcore} -m {memoryMiB}")
	assert.Contains(t, args, "--smlu-destroy-args=smlu -c {card} -destroy {id}", "the other commands keep their default")
	bad, err := ParseValues([]byte("plugins:\n  cambricon:\n    enabled: true\n    driver:\n      smlu:\n        destroyArgs: \"smlu -c {card} -destroy\"\n"))
	require.NoError(t, err)
	_, err = Render(DefaultRelease, bad)
	assert.ErrorContains(t, err, "/plugins/cambricon/driver/smlu/destroyArgs")
}

// TestRenderSimulate: plugins.<vendor>.simulate passes --simulate to the
// plugin, and the Ascend and Cambricon plugins then mount none of the
// host's vendor software (a node without accelerators has none); an
// invalid preset name is refused by the schema.
func TestRenderSimulate(t *testing.T) {
	values, err := ParseValues([]byte("plugins:\n  nvidia:\n    simulate: nvidia-dgx-h100\n  ascend:\n    enabled: true\n    simulate: huawei-atlas-800t-a2\n  cambricon:\n    enabled: true\n    simulate: cambricon-mlu370-x8\n"))
	require.NoError(t, err)
	r, err := Render(DefaultRelease, values)
	require.NoError(t, err)
	objs := objects(t, r)
	for ds, preset := range map[string]string{
		"strata-nvidia-kubelet-plugin": "nvidia-dgx-h100", "strata-ascend-kubelet-plugin": "huawei-atlas-800t-a2", "strata-cambricon-kubelet-plugin": "cambricon-mlu370-x8",
	} {
		obj := find(objs, "DaemonSet", ds)
		require.NotNil(t, obj, ds)
		assert.Contains(t, containerArgs(t, obj), "--simulate="+preset, ds)
		if ds == "strata-nvidia-kubelet-plugin" {
			continue
		}
		volumes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "volumes")
		for _, v := range volumes {
			name := v.(map[string]any)["name"]
			assert.NotContains(t, []any{"driver-root", "npu-smi", "cnmon"}, name, "%s mounts the host's %s under simulate", ds, name)
		}
	}
	def, err := Render(DefaultRelease, nil)
	require.NoError(t, err)
	for _, a := range containerArgs(t, find(objects(t, def), "DaemonSet", "strata-nvidia-kubelet-plugin")) {
		assert.NotContains(t, a, "--simulate", "the default install simulates nothing")
	}
	bad, err := ParseValues([]byte("plugins:\n  nvidia:\n    simulate: DGX H100\n"))
	require.NoError(t, err)
	_, err = Render(DefaultRelease, bad)
	require.ErrorContains(t, err, "simulate")
}

// cambriconPlugin checks what ci/cambricon-values.yaml installs beside the
// defaults: the Cambricon plugin in the pod network with the host's cnmon
// mounted at its host path, the sMLU memory unit, its health interval,
// its DeviceClasses and its lines in the slice policy and the plugins'
// FlowSchema.
func cambriconPlugin(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	assert.NotNil(t, find(objs, "DaemonSet", "strata-nvidia-kubelet-plugin"), "the NVIDIA plugin stays")
	assert.Nil(t, find(objs, "DaemonSet", "strata-ascend-kubelet-plugin"))
	ds := find(objs, "DaemonSet", "strata-cambricon-kubelet-plugin")
	require.NotNil(t, ds)
	assert.Equal(t, "cambricon-kubelet-plugin", ds.GetLabels()["app.kubernetes.io/component"])
	pod, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	assert.NotContains(t, pod, "hostNetwork", "the Cambricon plugin runs in the pod network")
	assert.Equal(t, "strata-cambricon-kubelet-plugin", pod["serviceAccountName"])
	assert.Equal(t, map[string]any{"accelerator": "cambricon-mlu"}, pod["nodeSelector"])
	assert.NotContains(t, pod, "tolerations")
	assert.Equal(t, "system-node-critical", pod["priorityClassName"])
	containers := pod["containers"].([]any)
	require.Len(t, containers, 1)
	c := containers[0].(map[string]any)
	assert.Equal(t, "ghcr.io/strata-sh/cambricon-kubelet-plugin:"+chartAppVersion(t), c["image"])
	privileged, _, _ := unstructured.NestedBool(c, "securityContext", "privileged")
	assert.True(t, privileged, "cnmon switches sMLU mode and creates and destroys sMLUs")
	assert.NotContains(t, c["securityContext"], "capabilities")
	assert.Equal(t, []any{map[string]any{"name": "metrics", "containerPort": float64(9404)}}, c["ports"])
	args := containerArgs(t, ds)
	for _, want := range []string{
		"--plugin-data-dir=/var/lib/kubelet/plugins/cambricon.strata.sh",
		"--registrar-dir=/var/lib/kubelet/plugins_registry",
		"--cdi-dir=/var/run/cdi",
		"--metrics-address=:9404",
		"--dev-root=/",
		"--cnmon=/usr/bin/cnmon",
		"--vendor-tool-timeout=30s",
		"--health-interval=30s",
		"--smlu-memory-unit=256Mi",
		"--smlu-info-args=smlu -c {card} -info",
		"--smlu-create-args=smlu -c {card} -create -mlu {vcore} -mem {memoryMiB}",
		"--smlu-destroy-args=smlu -c {card} -destroy {id}",
	} {
		assert.Contains(t, args, want)
	}
	for _, a := range args {
		assert.NotContains(t, a, "nvml", "no NVIDIA flag reaches the Cambricon plugin")
		assert.NotContains(t, a, "npu-smi", "no Ascend flag reaches the Cambricon plugin")
		assert.NotContains(t, a, "--driver-root", "no Ascend flag reaches the Cambricon plugin")
		assert.NotContains(t, a, "rail", "no RDMA flag reaches the Cambricon plugin")
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	assert.Equal(t, []any{
		map[string]any{"name": "plugin-data", "mountPath": "/var/lib/kubelet/plugins/cambricon.strata.sh"},
		map[string]any{"name": "plugins-registry", "mountPath": "/var/lib/kubelet/plugins_registry"},
		map[string]any{"name": "cdi", "mountPath": "/var/run/cdi"},
		map[string]any{"name": "cnmon", "mountPath": "/usr/bin/cnmon", "readOnly": true},
	}, mounts, "the kubelet's folders, the CDI folder and cnmon; no Ascend or NVIDIA driver root")
	volumes, _, _ := unstructured.NestedSlice(pod, "volumes")
	assert.Contains(t, volumes, map[string]any{"name": "cnmon", "hostPath": map[string]any{"path": "/usr/bin/cnmon", "type": "File"}})
	assert.Len(t, volumes, 4)
	strategy, _, _ := unstructured.NestedMap(ds.Object, "spec", "updateStrategy", "rollingUpdate")
	assert.Equal(t, map[string]any{"maxSurge": float64(1), "maxUnavailable": float64(0)}, strategy)

	// Whole cards and sMLUs are the same devices: the classes differ in
	// what their claims ask for, not in what they select.
	for _, class := range []string{"cambricon-mlu.strata.sh", "cambricon-smlu.strata.sh"} {
		dc := find(objs, "DeviceClass", class)
		if !assert.NotNil(t, dc, class) {
			continue
		}
		selectors, _, _ := unstructured.NestedSlice(dc.Object, "spec", "selectors")
		require.Len(t, selectors, 1)
		expr, _, _ := unstructured.NestedString(selectors[0].(map[string]any), "cel", "expression")
		assert.Equal(t, `device.driver == "cambricon.strata.sh" && device.attributes["cambricon.strata.sh"].type == "mlu"`, expr)
		assert.NotContains(t, dc.Object["spec"], "config", "%s: sMLUs need no opaque config", class)
		assert.Equal(t, "deviceclasses", dc.GetLabels()["app.kubernetes.io/component"])
	}

	assert.Equal(t, map[string]string{
		"system:serviceaccount:gpu-system:strata-nvidia-kubelet-plugin":    "nvidia.strata.sh",
		"system:serviceaccount:gpu-system:strata-cambricon-kubelet-plugin": "cambricon.strata.sh",
	}, policyDrivers(t, objs))
	vap := find(objs, "ValidatingAdmissionPolicy", "strata-node-restricted-slices")
	require.NotNil(t, vap)
	conditions, _, _ := unstructured.NestedSlice(vap.Object, "spec", "matchConditions")
	require.Len(t, conditions, 1)
	assert.Contains(t, conditions[0].(map[string]any)["expression"], `"system:serviceaccount:gpu-system:strata-cambricon-kubelet-plugin"`)
	fs := find(objs, "FlowSchema", "strata-kubelet-plugins")
	require.NotNil(t, fs)
	raw, _ := yaml.Marshal(fs.Object)
	assert.Contains(t, string(raw), "name: strata-cambricon-kubelet-plugin")
	role := find(objs, "ClusterRole", "strata-cambricon-kubelet-plugin")
	require.NotNil(t, role)
	raw, _ = yaml.Marshal(role.Object)
	assert.Contains(t, string(raw), "resourceslices")
	binding := find(objs, "ClusterRoleBinding", "strata-cambricon-kubelet-plugin")
	require.NotNil(t, binding)
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	assert.Equal(t, []any{map[string]any{"kind": "ServiceAccount", "name": "strata-cambricon-kubelet-plugin", "namespace": "gpu-system"}}, subjects)
}

// cnmon elsewhere and a larger sMLU memory step: cnmon is mounted where it
// is on the host and both reach the plugin's flags; deviceClasses: false
// keeps the plugin and drops its classes.
func TestRenderCambriconDriverSettings(t *testing.T) {
	values, err := ParseValues([]byte("plugins:\n  cambricon:\n    enabled: true\n    deviceClasses: false\n    driver:\n      cnmon: /usr/local/neuware/bin/cnmon\n      smluMemoryUnit: 1Gi\n"))
	require.NoError(t, err)
	r, err := Render(DefaultRelease, values)
	require.NoError(t, err)
	objs := objects(t, r)
	ds := find(objs, "DaemonSet", "strata-cambricon-kubelet-plugin")
	require.NotNil(t, ds)
	args := containerArgs(t, ds)
	assert.Contains(t, args, "--cnmon=/usr/local/neuware/bin/cnmon")
	assert.Contains(t, args, "--smlu-memory-unit=1Gi")
	assert.NotContains(t, args, "--cnmon=/usr/bin/cnmon")
	pod, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	mounts, _, _ := unstructured.NestedSlice(pod["containers"].([]any)[0].(map[string]any), "volumeMounts")
	assert.Contains(t, mounts, map[string]any{"name": "cnmon", "mountPath": "/usr/local/neuware/bin/cnmon", "readOnly": true})
	volumes, _, _ := unstructured.NestedSlice(pod, "volumes")
	assert.Contains(t, volumes, map[string]any{"name": "cnmon", "hostPath": map[string]any{"path": "/usr/local/neuware/bin/cnmon", "type": "File"}})
	assert.Nil(t, find(objs, "DeviceClass", "cambricon-mlu.strata.sh"))
	assert.Nil(t, find(objs, "DeviceClass", "cambricon-smlu.strata.sh"))
	assert.NotNil(t, find(objs, "DeviceClass", "accelerator.strata.sh"))
	assert.Contains(t, policyDrivers(t, objs), "system:serviceaccount:strata-system:strata-cambricon-kubelet-plugin")
}

// TestCambriconClassesSelectCards evaluates the classes' CEL as the
// allocator does, on a card as the cambricon.strata.sh plugin publishes it
// (its own attributes and the vendor-neutral ones): both Cambricon classes
// and accelerator.strata.sh select it; no other vendor's class does, and
// the Cambricon classes select no other vendor's device.
func TestCambriconClassesSelectCards(t *testing.T) {
	values, err := ParseValues([]byte("plugins:\n  cambricon:\n    enabled: true\n  ascend:\n    enabled: true\n  rdma:\n    enabled: true\n"))
	require.NoError(t, err)
	r, err := Render(DefaultRelease, values)
	require.NoError(t, err)
	classes := map[string]*unstructured.Unstructured{}
	for _, o := range objects(t, r) {
		if o.GetKind() == "DeviceClass" {
			classes[o.GetName()] = o
		}
	}
	require.Len(t, classes, 10)

	mluAttrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":        {StringValue: ptr.To("mlu")},
		"productName": {StringValue: ptr.To("MLU370-X8")},
	}
	accelerator.Device{Type: accelerator.MLU, Vendor: "cambricon", Model: "MLU370", Whole: true, MemoryBytes: 24 << 30}.AddAttributes(mluAttrs)
	mlu := dracel.Device{
		Driver:                   "cambricon.strata.sh",
		AllowMultipleAllocations: ptr.To(true),
		Attributes:               mluAttrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"vcore":   {Value: resource.MustParse("100")},
			"vmemory": {Value: resource.MustParse("24Gi")},
		},
	}
	npuAttrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("npu")}}
	accelerator.Device{Type: accelerator.NPU, Vendor: "huawei", Model: "910B", Whole: true, MemoryBytes: 64 << 30}.AddAttributes(npuAttrs)
	npu := dracel.Device{Driver: "ascend.strata.sh", Attributes: npuAttrs}

	compiler := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true})
	matches := func(class string, d dracel.Device) bool {
		t.Helper()
		dc := classes[class]
		require.NotNil(t, dc, class)
		selectors, _, _ := unstructured.NestedSlice(dc.Object, "spec", "selectors")
		for _, s := range selectors {
			expr, _, _ := unstructured.NestedString(s.(map[string]any), "cel", "expression")
			c := compiler.CompileCELExpression(expr, dracel.Options{})
			require.Nil(t, c.Error, "%s: %s", class, expr)
			ok, _, err := c.DeviceMatches(context.Background(), d)
			require.NoError(t, err, class)
			if !ok {
				return false
			}
		}
		return true
	}
	for name := range classes {
		wantMLU := name == "cambricon-mlu.strata.sh" || name == "cambricon-smlu.strata.sh" || name == "accelerator.strata.sh"
		assert.Equal(t, wantMLU, matches(name, mlu), "class %s on a Cambricon card", name)
	}
	assert.False(t, matches("cambricon-mlu.strata.sh", npu))
	assert.False(t, matches("cambricon-smlu.strata.sh", npu))
	assert.True(t, matches("accelerator.strata.sh", npu))
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	c, err := Load()
	require.NoError(t, err)
	return c.Metadata.AppVersion
}

// TestSchemaRefusesBadValues: values.schema.json names the value at
// fault for a wrong type and for an unknown key, at any depth.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"wrong type", "scheduler:\n  replicas: two\n", []string{"/scheduler/replicas", "integer"}},
		{"wrong enum", "plugins:\n  nvidia:\n    driver:\n      migMode: sometimes\n", []string{"/plugins/nvidia/driver/migMode"}},
		{"unknown top-level key", "schedular:\n  replicas: 1\n", []string{"schedular"}},
		{"unknown nested key", "plugins:\n  nvidia:\n    driver:\n      migmode: dynamic\n", []string{"/plugins/nvidia/driver", "migmode"}},
		{"unknown plugin key", "plugins:\n  nvidia:\n    nodeSelecter: {}\n", []string{"/plugins/nvidia", "nodeSelecter"}},
		{"relative path", "kubeletDir: var/lib/kubelet\n", []string{"/kubeletDir"}},
		{"bad duration", "plugins:\n  nvidia:\n    healthInterval: 5\n", []string{"/plugins/nvidia/healthInterval"}},
		{"zero duration", "plugins:\n  nvidia:\n    healthInterval: 0s\n", []string{"/plugins/nvidia/healthInterval"}},
		{"webhook port 0", "controller:\n  webhook:\n    port: 0\n", []string{"/controller/webhook/port"}},
		{"bad RDMA device name", "plugins:\n  rdma:\n    driver:\n      railDevices: [mlx5_0, \"mlx5_1,mlx5_2\"]\n", []string{"/plugins/rdma/driver/railDevices/1"}},
		{"RDMA device twice", "plugins:\n  rdma:\n    driver:\n      railDevices: [mlx5_0, mlx5_0]\n", []string{"/plugins/rdma/driver/railDevices"}},
		{"unknown RDMA driver key", "plugins:\n  rdma:\n    driver:\n      migMode: dynamic\n", []string{"/plugins/rdma/driver", "migMode"}},
		{"relative Ascend driver root", "plugins:\n  ascend:\n    driver:\n      root: usr/local/Ascend/driver\n", []string{"/plugins/ascend/driver/root"}},
		{"relative npu-smi path", "plugins:\n  ascend:\n    driver:\n      npuSmi: npu-smi\n", []string{"/plugins/ascend/driver/npuSmi"}},
		{"zero Ascend health interval", "plugins:\n  ascend:\n    healthInterval: 0s\n", []string{"/plugins/ascend/healthInterval"}},
		{"zero Ascend vendor tool timeout", "plugins:\n  ascend:\n    driver:\n      vendorToolTimeout: 0s\n", []string{"/plugins/ascend/driver/vendorToolTimeout"}},
		{"unknown Ascend driver key", "plugins:\n  ascend:\n    driver:\n      migMode: dynamic\n", []string{"/plugins/ascend/driver", "migMode"}},
		{"relative cnmon path", "plugins:\n  cambricon:\n    driver:\n      cnmon: cnmon\n", []string{"/plugins/cambricon/driver/cnmon"}},
		{"sMLU memory unit not a quantity", "plugins:\n  cambricon:\n    driver:\n      smluMemoryUnit: lots\n", []string{"/plugins/cambricon/driver/smluMemoryUnit"}},
		{"sMLU memory unit in decimal megabytes", "plugins:\n  cambricon:\n    driver:\n      smluMemoryUnit: 256M\n", []string{"/plugins/cambricon/driver/smluMemoryUnit"}},
		{"sMLU memory unit below a MiB", "plugins:\n  cambricon:\n    driver:\n      smluMemoryUnit: 512Ki\n", []string{"/plugins/cambricon/driver/smluMemoryUnit"}},
		{"zero sMLU memory unit", "plugins:\n  cambricon:\n    driver:\n      smluMemoryUnit: 0Mi\n", []string{"/plugins/cambricon/driver/smluMemoryUnit"}},
		{"sMLU memory unit as a number", "plugins:\n  cambricon:\n    driver:\n      smluMemoryUnit: 256\n", []string{"/plugins/cambricon/driver/smluMemoryUnit"}},
		{"Cambricon health interval not a duration", "plugins:\n  cambricon:\n    healthInterval: 30\n", []string{"/plugins/cambricon/healthInterval"}},
		{"unknown Cambricon driver key", "plugins:\n  cambricon:\n    driver:\n      npuSmi: /usr/local/bin/npu-smi\n", []string{"/plugins/cambricon/driver", "npuSmi"}},
		{"unknown Cambricon plugin key", "plugins:\n  cambricon:\n    cnmon: /usr/bin/cnmon\n", []string{"/plugins/cambricon", "cnmon"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values, err := ParseValues([]byte(tc.values))
			require.NoError(t, err)
			_, err = Render(DefaultRelease, values)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestReadValuesFiles: later files win, maps merge, as with helm -f.
func TestReadValuesFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	require.NoError(t, os.WriteFile(a, []byte("scheduler:\n  replicas: 1\n  leaderElection: {enabled: false}\n"), 0o644))
	require.NoError(t, os.WriteFile(b, []byte("scheduler:\n  replicas: 3\n"), 0o644))
	values, err := ReadValuesFiles([]string{a, b})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"scheduler": map[string]any{"replicas": float64(3), "leaderElection": map[string]any{"enabled": false}}}, values)
	_, err = ReadValuesFiles([]string{filepath.Join(dir, "missing.yaml")})
	assert.Error(t, err)
}

// TestRenderMPSDaemonPods: by default the NVIDIA plugin runs each GPU's
// MPS daemon in a pod of its own, from its own image, with the rights to
// make such pods in the release namespace and a policy that keeps it to
// its node's MPS pods; with mps.daemon=process none of that is rendered.
func TestRenderMPSDaemonPods(t *testing.T) {
	r, err := Render(DefaultRelease, map[string]any{"imagePullSecrets": []any{map[string]any{"name": "regcred"}}})
	require.NoError(t, err)
	objs := objects(t, r)
	ds := find(objs, "DaemonSet", "strata-nvidia-kubelet-plugin")
	require.NotNil(t, ds)
	args := containerArgs(t, ds)
	assert.Contains(t, args, "--mps-daemon=pod")
	assert.Contains(t, args, "--mps-daemon-driver-root=/")
	assert.Contains(t, args, "--mps-daemon-priority-class=system-node-critical")
	assert.Contains(t, args, "--mps-daemon-image-pull-secrets=regcred")
	image, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	assert.Contains(t, args, "--mps-daemon-image="+image[0].(map[string]any)["image"].(string), "the daemon pods run the plugin's image")
	env, _, _ := unstructured.NestedSlice(image[0].(map[string]any), "env")
	assert.Contains(t, fmt.Sprint(env), "POD_NAMESPACE")
	role := find(objs, "Role", "strata-nvidia-kubelet-plugin")
	require.NotNil(t, role)
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	assert.Equal(t, "[map[apiGroups:[] resources:[pods] verbs:[get list create delete]]]", fmt.Sprint(rules))
	require.NotNil(t, find(objs, "RoleBinding", "strata-nvidia-kubelet-plugin"))
	policy := find(objs, "ValidatingAdmissionPolicy", "strata-node-restricted-mps-pods")
	require.NotNil(t, policy)

	values, err := ParseValues([]byte("plugins:\n  nvidia:\n    mps:\n      daemon: process\n"))
	require.NoError(t, err)
	r, err = Render(DefaultRelease, values)
	require.NoError(t, err)
	objs = objects(t, r)
	assert.Contains(t, containerArgs(t, find(objs, "DaemonSet", "strata-nvidia-kubelet-plugin")), "--mps-daemon=process")
	assert.Nil(t, find(objs, "Role", "strata-nvidia-kubelet-plugin"))
	assert.Nil(t, find(objs, "ValidatingAdmissionPolicy", "strata-node-restricted-mps-pods"))

	_, err = ParseValues([]byte("plugins:\n  nvidia:\n    mps:\n      daemon: systemd\n"))
	if err == nil {
		_, err = Render(DefaultRelease, map[string]any{"plugins": map[string]any{"nvidia": map[string]any{"mps": map[string]any{"daemon": "systemd"}}}})
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/plugins/nvidia/mps/daemon")
}
