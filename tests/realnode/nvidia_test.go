package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/realnode"
)

var nvidiaOnce sync.Once

// nvidiaNode runs the NVIDIA plugin from its image on the real node with
// the chart's simulate value (an HGX H100, dynamic MIG), as a platform
// team trying the chart on a cluster without GPUs would, and waits for
// its devices.
func nvidiaNode(t *testing.T) (*env, *realnode.Node) {
	t.Helper()
	e, n := realNode(t)
	started := false
	nvidiaOnce.Do(func() {
		ds := nvidiaDaemonSet(t, n)
		e.runPlugin(t, n, ds)
		waitDevices(t, e, n.Name(), nvidia.DriverName)
		started = true
	})
	if !started && !nvidiaStarted(e, n.Name()) {
		t.Fatal("the NVIDIA plugin did not start on the real node (see the first NVIDIA test's failure)")
	}
	return e, n
}

// nvidiaDaemonSet is the NVIDIA plugin's DaemonSet as nvidiaNode runs it.
func nvidiaDaemonSet(t *testing.T, n *realnode.Node) *appsv1.DaemonSet {
	return pluginDaemonSet(t, n, "nvidia", map[string]any{"plugins": map[string]any{"nvidia": map[string]any{
		"simulate": "nvidia-hgx-h100-cpu-nics",
		"driver":   map[string]any{"migMode": "dynamic"},
	}}})
}

func nvidiaStarted(e *env, node string) bool {
	slices, err := e.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, s := range slices.Items {
		if s.Spec.Driver == nvidia.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			return true
		}
	}
	return false
}

// TestNVIDIASimulatedDevicesSaySo: every device the plugin publishes on
// a simulated machine carries simulated: true, which a user sees in the
// slices and can select on.
func TestNVIDIASimulatedDevicesSaySo(t *testing.T) {
	e, n := nvidiaNode(t)
	slices, err := e.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devices := 0
	for _, s := range slices.Items {
		if s.Spec.Driver != nvidia.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != n.Name() {
			continue
		}
		for _, d := range s.Spec.Devices {
			devices++
			if v := d.Attributes[plugin.SimulatedAttribute].BoolValue; v == nil || !*v {
				t.Errorf("device %s does not say it is simulated: %v", d.Name, d.Attributes)
			}
		}
	}
	if devices == 0 {
		t.Fatal("no NVIDIA devices published")
	}
}

// gpuScript prints the container's NVIDIA device nodes and environment
// and what HAMi-core would have.
const gpuScript = `for f in /dev/* /dev/nvidia-caps/*; do [ -c "$f" ] && echo "dev $f $(stat -c '%t:%T' "$f")"; done; ` +
	`env | grep -E '^(NVIDIA|CUDA)' | sed 's/^/env /'; ` +
	`for f in /usr/local/vgpu/libvgpu.so /etc/ld.so.preload; do [ -e "$f" ] && echo "file $f"; done; true`

var gpuNode = regexp.MustCompile(`dev /dev/nvidia(\d+) c3:([0-9a-f]+)`)
var capNode = regexp.MustCompile(`dev /dev/nvidia-caps/nvidia-cap\d+ `)

// TestNVIDIAWholeGPUOnRealNode: a container claiming a whole GPU sees one
// GPU node (char 195:N) with the control and UVM nodes, and
// NVIDIA_VISIBLE_DEVICES=void; the pod's container that names no claim
// and a pod without a claim see no NVIDIA device.
func TestNVIDIAWholeGPUOnRealNode(t *testing.T) {
	e, n := nvidiaNode(t)
	claimTemplate(t, e, "one-gpu", "nvidia-gpu.strata.sh", "")
	p := withClaim(shellPod("gpu-whole", n.Name(), map[string]string{"trainer": gpuScript, "sidecar": gpuScript}, "ubuntu:22.04"), "one-gpu", "trainer")
	logs := podLogs(t, e.client, createPod(t, e, p), 3*time.Minute)
	plain := podLogs(t, e.client, createPod(t, e, shellPod("gpu-none", n.Name(), map[string]string{"main": gpuScript}, "ubuntu:22.04")), 3*time.Minute)

	trainer := logs["trainer"]
	gpus := gpuNode.FindAllStringSubmatch(trainer, -1)
	if len(gpus) != 1 || fmt.Sprintf("%x", mustAtoi(t, gpus[0][1])) != gpus[0][2] {
		t.Fatalf("trainer sees GPU nodes %q, want one nvidiaN with minor N; output:\n%s", gpus, trainer)
	}
	for _, want := range []string{"dev /dev/nvidiactl c3:ff", "dev /dev/nvidia-uvm 1ff:0", "dev /dev/nvidia-uvm-tools 1ff:1", "env NVIDIA_VISIBLE_DEVICES=void"} {
		if !strings.Contains(trainer, want) {
			t.Errorf("trainer lacks %q; output:\n%s", want, trainer)
		}
	}
	if capNode.MatchString(trainer) || strings.Contains(trainer, "CUDA_DEVICE_MEMORY_LIMIT") {
		t.Errorf("a whole GPU's container sees MIG capabilities or sharing limits:\n%s", trainer)
	}
	for name, out := range map[string]string{"sidecar (no claim named)": logs["sidecar"], "pod without a claim": plain["main"]} {
		if strings.Contains(out, "dev /dev/nvidia") || strings.Contains(out, "NVIDIA_VISIBLE_DEVICES") {
			t.Errorf("%s sees an NVIDIA device:\n%s", name, out)
		}
	}
}

// TestNVIDIAPerRequestContainersOnRealNode: the per-request-containers
// example (one claim, a whole GPU for one container and a MIG slice for
// the other): each container sees only its own request's devices, the MIG
// container its GPU's node and the two capability nodes of its instance.
func TestNVIDIAPerRequestContainersOnRealNode(t *testing.T) {
	e, n := nvidiaNode(t)
	pods := applyExample(t, e, n, "nvidia/per-request-containers.yaml", gpuScript)
	logs := podLogs(t, e.client, pods[0], 3*time.Minute)
	trainer, sidecar := logs["trainer"], logs["sidecar"]
	tg, sg := gpuNode.FindAllStringSubmatch(trainer, -1), gpuNode.FindAllStringSubmatch(sidecar, -1)
	if len(tg) != 1 || len(sg) != 1 {
		t.Fatalf("trainer sees GPUs %q, sidecar %q; want one each.\ntrainer:\n%s\nsidecar:\n%s", tg, sg, trainer, sidecar)
	}
	if tg[0][1] == sg[0][1] {
		t.Errorf("the whole GPU and the MIG slice are the same GPU %s", tg[0][1])
	}
	if got := len(capNode.FindAllString(sidecar, -1)); got != 2 {
		t.Errorf("the MIG container sees %d capability nodes, want its GPU instance's and compute instance's:\n%s", got, sidecar)
	}
	if capNode.MatchString(trainer) {
		t.Errorf("the whole-GPU container sees MIG capability nodes:\n%s", trainer)
	}
}

// TestNVIDIASharedGPUOnRealNode: the shared-hami example: two pods each
// with half an H100 share one GPU, and each container sees that GPU with
// HAMi-core's limits in its environment and the library preloaded.
func TestNVIDIASharedGPUOnRealNode(t *testing.T) {
	e, n := nvidiaNode(t)
	pods := applyExample(t, e, n, "nvidia/shared-hami.yaml", gpuScript)
	if len(pods) != 2 {
		t.Fatalf("the example has %d pods, want 2", len(pods))
	}
	var seen []string
	for _, p := range pods {
		for _, out := range podLogs(t, e.client, p, 3*time.Minute) {
			gpus := gpuNode.FindAllStringSubmatch(out, -1)
			if len(gpus) != 1 {
				t.Fatalf("pod %s sees GPUs %q, want one:\n%s", p.Name, gpus, out)
			}
			seen = append(seen, gpus[0][1])
			for _, want := range []string{"env CUDA_DEVICE_MEMORY_LIMIT=40960m", "env CUDA_DEVICE_SM_LIMIT=50", "file /usr/local/vgpu/libvgpu.so", "file /etc/ld.so.preload"} {
				if !strings.Contains(out, want) {
					t.Errorf("pod %s lacks %q:\n%s", p.Name, want, out)
				}
			}
		}
	}
	if len(seen) == 2 && seen[0] != seen[1] {
		t.Errorf("the two halves are on GPUs %s and %s, want one GPU shared", seen[0], seen[1])
	}
}

// applyExample creates an example's ResourceClaimTemplates and its pods,
// made to run on the real node: each container runs script in the local
// busybox image (the examples name public images) on the host network,
// without CPU and memory requests (the node is this machine). Everything
// else of the pods (claims, requests named per container) is the
// example's.
func applyExample(t *testing.T, e *env, n *realnode.Node, file, script string) []*corev1.Pod {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deployments", "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := apply.Decode(raw, file)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var pods []*corev1.Pod
	for _, o := range objs {
		switch o.GetKind() {
		case "ResourceClaimTemplate":
			tmpl := &resourcev1.ResourceClaimTemplate{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, tmpl); err != nil {
				t.Fatal(err)
			}
			tmpl.Namespace = metav1.NamespaceDefault
			if _, err := e.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = e.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{})
			})
		case "Pod":
			p := &corev1.Pod{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, p); err != nil {
				t.Fatal(err)
			}
			p.Namespace = metav1.NamespaceDefault
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
			p.Spec.HostNetwork = true
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			grace := int64(1)
			p.Spec.TerminationGracePeriodSeconds = &grace
			for i := range p.Spec.Containers {
				c := &p.Spec.Containers[i]
				c.Image, c.ImagePullPolicy = "busybox", corev1.PullIfNotPresent
				c.Command, c.Args = []string{"sh", "-c", script}, nil
				// The real node has this machine's CPUs and memory, not a
				// GPU server's.
				c.Resources.Requests, c.Resources.Limits = nil, nil
			}
			pods = append(pods, createPod(t, e, p))
		}
	}
	return pods
}

// TestNVIDIASimulateRefusedWhereGPUsAre: on a node whose plugin pod sees
// an NVIDIA control device (a real one, as privileged pods see the host's
// /dev), the plugin with the chart's simulate value refuses to start and
// says why in its log, exiting with an error.
func TestNVIDIASimulateRefusedWhereGPUsAre(t *testing.T) {
	e, n := realNode(t)
	ctx := context.Background()
	// The node's "real" GPU: its control device, where the host's /dev
	// would show it to the privileged plugin.
	gpu := filepath.Join(n.Dir, "real-gpu")
	if err := hardware.MakeDeviceNodes(gpu, []hardware.DeviceNode{{Path: "nvidiactl", Major: hardware.NvidiaMajor, Minor: 255}}); err != nil {
		t.Fatal(err)
	}
	ds := pluginDaemonSet(t, n, "nvidia", map[string]any{"plugins": map[string]any{"nvidia": map[string]any{"simulate": "nvidia-dgx-h100"}}})
	kubeconfig := filepath.Join(e.dir, "admin.kubeconfig")
	pod := realnode.PluginPod("refused-nvidia-plugin", ds.Namespace, ds.Spec.Template, kubeconfig)
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "real-gpu", MountPath: "/dev/nvidiactl"})
	charDev := corev1.HostPathCharDev
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "real-gpu", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(gpu, "dev", "nvidiactl"), Type: &charDev}}})
	if err := n.RunStaticPod(pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.RemoveStaticPod(pod.Name) })
	mirror := pod.Name + "-" + n.Name()
	var log string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := e.client.CoreV1().Pods(pod.Namespace).GetLogs(mirror, &corev1.PodLogOptions{Container: "plugin"}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		log = string(raw)
		return strings.Contains(log, "failed"), nil
	})
	if err != nil {
		t.Fatalf("the plugin did not stop on a node with an NVIDIA device; its log:\n%s", log)
	}
	for _, want := range []string{"this node has real nvidia devices", "/dev/nvidiactl", "refusing to publish simulated ones"} {
		if !strings.Contains(log, want) {
			t.Errorf("the plugin's refusal lacks %q:\n%s", want, log)
		}
	}
	// The container exits with an error, and the kubelet keeps restarting
	// it: the operator sees a crash-looping plugin pod with the reason.
	waitPod(t, e.client, pod.Namespace, mirror, 2*time.Minute, func(p *corev1.Pod) bool {
		for _, c := range p.Status.ContainerStatuses {
			for _, st := range []corev1.ContainerState{c.State, c.LastTerminationState} {
				if st.Terminated != nil && st.Terminated.ExitCode == 1 {
					return true
				}
			}
		}
		return false
	})
}

// TestNVIDIAMPSOutlivesPluginOnRealNode: a pod whose container uses its
// GPU's MPS server keeps using the same server while the plugin's pod is
// removed and started again (as a rolling update or an OOM kill does):
// the daemon runs in a pod of its own, which the plugin made on its node.
// When the claim goes, the restarted plugin stops the daemon and deletes
// its pod. The container is a stand-in MPS client: it starts a server and
// prints the daemon's server list every second.
func TestNVIDIAMPSOutlivesPluginOnRealNode(t *testing.T) {
	e, n := nvidiaNode(t)
	ctx := context.Background()
	mpsConfig := runtime.RawExtension{Raw: []byte(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`)}
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "mps-client", Namespace: metav1.NamespaceDefault},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "dev", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "nvidia-gpu.strata.sh"}}},
			Config: []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
				Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: nvidia.DriverName, Parameters: mpsConfig}}}},
		}}},
	}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{})
	})
	client := shellPod("mps-client", n.Name(), map[string]string{"main": ""}, sim.ImageRegistry+"/nvidia-kubelet-plugin:"+sim.ImageTag)
	client.Spec.Containers[0].Command = []string{"/usr/bin/nvidia-kubelet-plugin", "simulated-mps-control", "strata-fake", "watch", "1s"}
	client = createPod(t, e, withClaim(client, tmpl.Name, "main"))
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(client.Namespace).Get(ctx, client.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		events, _ := e.client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		var msgs []string
		for _, ev := range events.Items {
			if ev.Type == corev1.EventTypeWarning {
				msgs = append(msgs, fmt.Sprintf("%s %s: %s", ev.InvolvedObject.Name, ev.Reason, ev.Message))
			}
		}
		t.Fatalf("the MPS client pod does not run: warnings %q\nplugin logs: %v", msgs, n.ContainerLogs("strata-system", "strata-"))
	}
	servers := regexp.MustCompile(`(?m)^(\S+) servers=(\S+)$`)
	first := servers.FindStringSubmatch(runningLog(t, e, client, "main", "servers=", 3*time.Minute))
	if first == nil {
		t.Fatalf("the client's first line has no server list")
	}

	daemons := func() []corev1.Pod {
		pods, err := e.client.CoreV1().Pods("strata-system").List(ctx, metav1.ListOptions{LabelSelector: nvidia.MPSPodNameLabel + "=" + nvidia.MPSPodName})
		if err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}
	before := daemons()
	if len(before) != 1 || before[0].Spec.NodeName != n.Name() || before[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("MPS daemon pods %v, want one running on %s", podStates(before), n.Name())
	}

	ds := nvidiaDaemonSet(t, n)
	mirror := ds.Name + "-" + n.Name()
	if err := n.RemoveStaticPod(ds.Name); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, "strata-system", mirror)
	gone := time.Now().UTC()
	// Three more seconds of the client's lines, all after the plugin went.
	var after []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := e.client.CoreV1().Pods(client.Namespace).GetLogs(client.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		after = nil
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			at, err := time.Parse(time.RFC3339Nano, strings.Fields(line + " x")[0])
			if err == nil && at.After(gone) {
				after = append(after, line)
			}
		}
		return len(after) >= 3, nil
	})
	if err != nil {
		t.Fatalf("the client printed %d lines after the plugin went: %q", len(after), after)
	}
	for _, line := range after {
		if m := servers.FindStringSubmatch(line); m == nil || m[2] != first[2] {
			t.Errorf("after the plugin went the client saw %q, want the same servers %s as before", line, first[2])
		}
	}
	now := daemons()
	if len(now) != 1 || now[0].UID != before[0].UID || now[0].Status.Phase != corev1.PodRunning || restartCount(&now[0]) != 0 {
		t.Errorf("MPS daemon pods after the plugin went: %v, want %s still running without restarts", podStates(now), before[0].Name)
	}

	// The plugin comes back; once the claim goes, it stops the daemon.
	e.runPlugin(t, n, ds)
	if err := e.client.CoreV1().Pods(client.Namespace).Delete(ctx, client.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, "strata-system", before[0].Name)
	dirs, _ := filepath.Glob(filepath.Join(n.KubeletDir(), "plugins", nvidia.DriverName, "mps", "*", "pipe"))
	if len(dirs) != 0 {
		t.Errorf("MPS pipe directories left after the last MPS claim: %v", dirs)
	}
}

func podStates(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, fmt.Sprintf("%s (uid %s, node %s, %s, %d restarts)", p.Name, p.UID, p.Spec.NodeName, p.Status.Phase, restartCount(&p)))
	}
	return out
}

// TestNVIDIAPluginRestartKeepsMIGOnRealNode: a container using a MIG
// slice made for its claim keeps it while the plugin's process is killed
// and restarted; a claim prepared after the restart gets another
// placement (the GPUs still have the first instance: the simulated GPUs
// keep their state across plugin restarts as real ones do); when both
// pods go, no MIG instance is left and the checkpoint holds no claim.
func TestNVIDIAPluginRestartKeepsMIGOnRealNode(t *testing.T) {
	e, n := nvidiaNode(t)
	ctx := context.Background()
	claimTemplate(t, e, "mig-slice", "nvidia-mig.strata.sh", `device.attributes["nvidia.strata.sh"].profile == "1g.10gb"`)
	long := func(name string) *corev1.Pod {
		return createPod(t, e, withClaim(shellPod(name, n.Name(), map[string]string{"main": gpuScript + "; echo seen; sleep 3600"}, "busybox"), "mig-slice", "main"))
	}
	state := filepath.Join(n.KubeletDir(), "plugins", nvidia.DriverName, "simulated", "nvml.json")
	instances := func() []string {
		raw, err := os.ReadFile(state)
		if err != nil {
			t.Fatalf("the simulated GPUs' state: %v", err)
		}
		var st struct {
			GPUs []struct {
				Instances []struct{ ID, Start, Size uint32 } `json:"instances"`
			} `json:"gpus"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		var out []string
		for g, gpu := range st.GPUs {
			for _, in := range gpu.Instances {
				out = append(out, fmt.Sprintf("gpu%d/gi%d@%d+%d", g, in.ID, in.Start, in.Size))
			}
		}
		return out
	}
	first := long("mig-survivor")
	if out := runningLog(t, e, first, "main", "seen", 3*time.Minute); len(capNode.FindAllString(out, -1)) != 2 {
		t.Fatalf("the MIG container sees capability nodes %q, want its instance's two", capNode.FindAllString(out, -1))
	}
	before := instances()
	if len(before) != 1 {
		t.Fatalf("MIG instances %v with one MIG claim, want one", before)
	}

	mirror := "strata-nvidia-kubelet-plugin-" + n.Name()
	restartsBefore := restarts(t, e, "strata-system", mirror)
	if killed, err := n.KillProcesses("nvidia-kubelet-plugin"); err != nil || killed < 1 {
		t.Fatalf("killed %d plugin processes (%v)", killed, err)
	}
	waitPod(t, e.client, "strata-system", mirror, 2*time.Minute, func(p *corev1.Pod) bool {
		return restartCount(p) > restartsBefore && p.Status.ContainerStatuses[0].State.Running != nil
	})
	second := long("mig-after-restart")
	runningLog(t, e, second, "main", "seen", 3*time.Minute)
	after := instances()
	if len(after) != 2 || !slices.Contains(after, before[0]) {
		t.Errorf("MIG instances after the restart and a second claim: %v, want %s and one more", after, before[0])
	}
	cur, err := e.client.CoreV1().Pods(first.Namespace).Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status.Phase != corev1.PodRunning || restartCount(cur) != 0 {
		t.Errorf("the first MIG pod is %s with %d restarts after the plugin restarted", cur.Status.Phase, restartCount(cur))
	}

	var claims []string
	for _, p := range []*corev1.Pod{first, second} {
		claims = append(claims, podClaimUID(t, e, p))
		if err := e.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := filepath.Join(n.KubeletDir(), "plugins", nvidia.DriverName, "checkpoint.json")
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		raw, err := os.ReadFile(checkpoint)
		if err != nil || len(instances()) != 0 {
			return false, nil
		}
		for _, uid := range claims {
			if strings.Contains(string(raw), uid) || len(specsOf(t, n.CDIDir(), uid)) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		raw, _ := os.ReadFile(checkpoint)
		t.Fatalf("after the MIG pods went: instances %v, checkpoint:\n%s", instances(), raw)
	}
}
