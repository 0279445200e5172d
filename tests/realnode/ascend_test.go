package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/ascend"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/sim/realnode"
)

// ascendMachine is the fake Ascend server of the real node: an Atlas
// 800T A2's sysfs, /proc/devices and device nodes, its driver folders,
// and the fake npu-smi in the driver's place.
type ascendMachine struct {
	root    string
	machine hardware.Machine
}

var (
	ascendOnce sync.Once
	ascendHW   *ascendMachine
)

// ascendNode runs the Ascend plugin from its image on the real node, as
// the chart's DaemonSet would, over a fake Atlas 800T A2, and waits for
// its devices to be published.
func ascendNode(t *testing.T) (*env, *realnode.Node, *ascendMachine) {
	t.Helper()
	e, n := realNode(t)
	ascendOnce.Do(func() {
		hw, err := writeAscendMachine(filepath.Join(n.Dir, "hw"), filepath.Join(e.bin, "npu-smi"))
		if err != nil {
			t.Fatal(err)
		}
		e.runPlugin(t, n, ascendDaemonSet(t, n, hw), hw.root)
		waitDevices(t, e, n.Name(), ascend.DriverName)
		ascendHW = hw
	})
	if ascendHW == nil {
		t.Fatal("the Ascend plugin did not start on the real node (see the first Ascend test's failure)")
	}
	return e, n, ascendHW
}

// ascendDaemonSet is the chart's Ascend plugin DaemonSet for the real
// node, its driver paths and hardware roots pointing at the fake machine.
func ascendDaemonSet(t *testing.T, n *realnode.Node, hw *ascendMachine) *appsv1.DaemonSet {
	return pluginDaemonSet(t, n, "ascend", map[string]any{"plugins": map[string]any{"ascend": map[string]any{
		// Short, for the hung-tool and health tests.
		"healthInterval": "2s",
		"driver": map[string]any{
			"root":              hw.path("usr/local/Ascend/driver"),
			"npuSmi":            hw.path("usr/local/bin/npu-smi"),
			"dcmi":              hw.path("usr/local/dcmi"),
			"vendorToolTimeout": ascendToolTimeout.String(),
		},
		"extraArgs": []any{"--sysfs-root=" + hw.path(hardware.SysDir), "--proc-root=" + hw.path(hardware.ProcDir), "--dev-root=" + hw.root,
			"--boot-id-path=" + hw.path(hardware.BootIDFile)},
	}}})
}

func (m *ascendMachine) path(rel string) string { return filepath.Join(m.root, rel) }

// ascendToolTimeout is the suite's npu-smi deadline.
const ascendToolTimeout = 8 * time.Second

// npuSMI runs the machine's fake npu-smi on the host, as the tests drive
// the fake hardware ("strata-fake" commands).
func (m *ascendMachine) npuSMI(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(m.path("usr/local/bin/npu-smi"), args...).CombinedOutput(); err != nil {
		t.Fatalf("npu-smi %v: %v: %s", args, err, out)
	}
}

func writeAscendMachine(root, npuSMI string) (*ascendMachine, error) {
	m := hardware.AtlasA2()
	hw := &ascendMachine{root: root, machine: m}
	if err := hardware.WriteNode(root, m, "8b0c1f6e-2d3a-4c5b-9e7f-0a1b2c3d4e5f"); err != nil {
		return nil, err
	}
	if err := hardware.WriteDeviceNodes(root, m); err != nil {
		return nil, err
	}
	for _, d := range []string{"usr/local/Ascend/driver/lib64", "usr/local/Ascend/driver/include", "usr/local/dcmi", "usr/local/bin", "var"} {
		if err := os.MkdirAll(hw.path(d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(hw.path("usr/local/Ascend/driver/version.info"), []byte("Version=24.1.rc2\n"), 0o644); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(npuSMI)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(hw.path("usr/local/bin/npu-smi"), bin, 0o755); err != nil {
		return nil, err
	}
	settings, _ := json.Marshal(map[string]any{"model": m.NPUModel, "devices": len(m.NPUs()), "state": hw.path("var/npu-smi.state"), "devRoot": root})
	if err := os.WriteFile(hw.path("usr/local/bin/npu-smi.json"), settings, 0o644); err != nil {
		return nil, err
	}
	return hw, nil
}

// waitDevices waits for a driver's ResourceSlices of a node.
func waitDevices(t *testing.T, e *env, node, driver string) {
	t.Helper()
	if err := e.sim.WaitDevices(context.Background(), e.nodeByName(node), driver); err != nil {
		t.Fatal(err)
	}
}

// claimTemplate makes a ResourceClaimTemplate of one request, asking for
// capacity (a share of a device) if given.
func claimTemplate(t *testing.T, e *env, name, class, cel string, capacity ...map[string]string) {
	t.Helper()
	req := resourcev1.ExactDeviceRequest{DeviceClassName: class}
	if cel != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}
	}
	for _, c := range capacity {
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{}}
		for k, v := range c {
			req.Capacity.Requests[resourcev1.QualifiedName(k)] = resource.MustParse(v)
		}
	}
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "dev", Exactly: &req}},
		}}},
	}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// withClaim gives the pod a claim from a template and lets the named
// containers use it.
func withClaim(p *corev1.Pod, template string, containers ...string) *corev1.Pod {
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "dev", ResourceClaimTemplateName: &template})
	for i := range p.Spec.Containers {
		for _, c := range containers {
			if p.Spec.Containers[i].Name == c {
				p.Spec.Containers[i].Resources.Claims = append(p.Spec.Containers[i].Resources.Claims, corev1.ResourceClaim{Name: "dev"})
			}
		}
	}
	return p
}

// seeDevices is the script each container runs: the accelerator device
// nodes it has, with type and numbers, and its Ascend environment.
const seeDevices = `for f in /dev/*; do [ -c "$f" ] && echo "dev $f $(stat -c '%t:%T' "$f")"; done; env | grep -E '^ASCEND' | sed 's/^/env /'; ls -d /usr/local/dcmi 2>/dev/null | sed 's/^/mount /'`

var davinciDev = regexp.MustCompile(`dev /dev/v?davinci\d+ `)

// TestAscendWholeNPUOnRealNode: a container whose pod claims a whole NPU
// sees that NPU's device node (and the manager nodes) with the numbers of
// the host's, and ASCEND_VISIBLE_DEVICES naming it; a second container of
// the same pod that does not name the claim, and a pod without a claim,
// see no NPU.
func TestAscendWholeNPUOnRealNode(t *testing.T) {
	e, n, _ := ascendNode(t)
	claimTemplate(t, e, "one-npu", "ascend-npu.strata.sh", "")
	p := withClaim(shellPod("npu-whole", n.Name(), map[string]string{"trainer": seeDevices, "sidecar": seeDevices}, "busybox"), "one-npu", "trainer")
	plain := shellPod("no-claim", n.Name(), map[string]string{"main": seeDevices}, "busybox")
	logs := podLogs(t, e.client, createPod(t, e, p), 3*time.Minute)
	plainLogs := podLogs(t, e.client, createPod(t, e, plain), 3*time.Minute)

	trainer := logs["trainer"]
	npus := davinciDev.FindAllString(trainer, -1)
	if len(npus) != 1 {
		t.Fatalf("trainer sees NPU device nodes %q, want exactly one; output:\n%s", npus, trainer)
	}
	minor := strings.TrimPrefix(strings.Fields(npus[0])[1], "/dev/davinci")
	// stat prints hex numbers.
	if want := fmt.Sprintf("dev /dev/davinci%s ec:%x", minor, mustAtoi(t, minor)); !strings.Contains(trainer, want) {
		t.Errorf("trainer's NPU node is not the host's (char 236:%s): want %q in\n%s", minor, want, trainer)
	}
	for _, want := range []string{"dev /dev/davinci_manager ed:0", "dev /dev/devmm_svm ee:0", "dev /dev/hisi_hdc ef:0", "env ASCEND_VISIBLE_DEVICES=" + minor} {
		if !strings.Contains(trainer, want) {
			t.Errorf("trainer lacks %q; output:\n%s", want, trainer)
		}
	}
	for name, out := range map[string]string{"sidecar (no claim named)": logs["sidecar"], "pod without a claim": plainLogs["main"]} {
		if got := davinciDev.FindAllString(out, -1); len(got) > 0 || strings.Contains(out, "ASCEND_VISIBLE_DEVICES") {
			t.Errorf("%s sees an NPU: %q; output:\n%s", name, got, out)
		}
	}
}

// TestAscendVNPUOnRealNode: a vNPU claim makes npu-smi create a vNPU; the
// container sees its vdavinci node, and once the pod is gone the vNPU,
// its device node and the claim's CDI spec are gone too.
func TestAscendVNPUOnRealNode(t *testing.T) {
	e, n, hw := ascendNode(t)
	claimTemplate(t, e, "vnpu-5", "ascend-vnpu.strata.sh", `device.attributes["ascend.strata.sh"].template == "vir05_1c_16g"`)
	// The pod stays running, so the claim stays prepared while the host
	// is checked.
	p := createPod(t, e, withClaim(shellPod("vnpu", n.Name(), map[string]string{"server": seeDevices + "; echo seen; sleep 3600"}, "busybox"), "vnpu-5", "server"))
	out := runningLog(t, e, p, "server", "seen", 3*time.Minute)
	vnpus := regexp.MustCompile(`dev /dev/vdavinci(\d+) ec:([0-9a-f]+)`).FindAllStringSubmatch(out, -1)
	if len(vnpus) != 1 {
		t.Fatalf("container sees vNPU nodes %v, want one; output:\n%s", vnpus, out)
	}
	if id := mustAtoi(t, vnpus[0][1]); fmt.Sprintf("%x", id) != vnpus[0][2] {
		t.Errorf("vdavinci%d has minor 0x%s, want its vNPU id", id, vnpus[0][2])
	}
	if len(davinciDev.FindAllString(out, -1)) != 1 {
		t.Errorf("container sees more than its vNPU:\n%s", out)
	}
	hostNode := hw.path("dev/vdavinci" + vnpus[0][1])
	if _, err := os.Stat(hostNode); err != nil {
		t.Errorf("the fake driver has no %s while the vNPU exists: %v", hostNode, err)
	}
	claimUID := podClaimUID(t, e, p)
	if specs := specsOf(t, n.CDIDir(), claimUID); len(specs) != 1 {
		t.Errorf("the prepared claim has CDI specs %v, want one", specs)
	}
	if err := e.client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := os.Stat(hostNode)
		return os.IsNotExist(err) && len(specsOf(t, n.CDIDir(), claimUID)) == 0, nil
	})
	if err != nil {
		specs := specsOf(t, n.CDIDir(), claimUID)
		t.Fatalf("after the pod went, the vNPU's node or CDI spec stayed: node %s, specs %v", hostNode, specs)
	}
}

// runningLog waits for a running container's log to contain marker and
// returns it.
func runningLog(t *testing.T, e *env, p *corev1.Pod, container, marker string, timeout time.Duration) string {
	t.Helper()
	var log string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		raw, err := e.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		log = string(raw)
		return strings.Contains(log, marker), nil
	})
	if err != nil {
		cur, _ := e.client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		t.Fatalf("container %s of pod %s never printed %q (log %q, status %+v)", container, p.Name, marker, log, cur.Status)
	}
	return log
}

// podClaimUID returns the UID of the claim made for a pod's one claim.
func podClaimUID(t *testing.T, e *env, p *corev1.Pod) string {
	t.Helper()
	cur, err := e.client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Status.ResourceClaimStatuses) != 1 || cur.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has claims %+v, want one", p.Name, cur.Status.ResourceClaimStatuses)
	}
	claim, err := e.client.ResourceV1().ResourceClaims(p.Namespace).Get(context.Background(), *cur.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(claim.UID)
}

// specsOf lists the CDI spec files of a claim in a node's CDI folder.
func specsOf(t *testing.T, dir, claimUID string) []string {
	t.Helper()
	specs, err := filepath.Glob(filepath.Join(dir, "*"+claimUID+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var v int
	if _, err := fmt.Sscanf(s, "%d", &v); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return v
}
