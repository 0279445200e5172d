package nvidia

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

// mpsControlArg makes this test binary the stand-in for
// nvidia-cuda-mps-control: a real process per daemon, talked to through
// its pipe directory, as the real program is.
const mpsControlArg = "strata-test-mps-control"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == mpsControlArg {
		os.Exit(nvmlmock.MPSControlMain([]string{os.Args[0], mpsControlArg}, os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func standInMPS(stateDir string) ExecMPS {
	return ExecMPS{Command: []string{os.Args[0], mpsControlArg}, StateDir: stateDir}
}

// daemonPID is the PID the daemon in dir logged last; 0 if none.
func daemonPID(t *testing.T, dir string) int {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, "log", "control.log"))
	m := regexp.MustCompile(`Control daemon started, pid (\d+)`).FindAllStringSubmatch(string(b), -1)
	if len(m) == 0 {
		return 0
	}
	pid, _ := strconv.Atoi(m[len(m)-1][1])
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

func killDaemon(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !exited(pid) {
		t.Fatalf("daemon %d still runs", pid)
	}
}

// mpsBackend is a backend whose MPS daemons are stand-in processes.
func mpsBackend(t *testing.T) (context.Context, *Backend) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	b, _, _ := newBackend(t, hardware.DGXH100())
	b.cfg.MPS = standInMPS(b.cfg.StateDir)
	if _, err := b.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, b
}

func mpsClaim(t *testing.T, uid, device string) *plugin.PrepareRequest {
	return claimRequest(uid, plugin.AllocatedDevice{Request: "gpu", Device: device, Config: effective(t, sharingConfig(`{"strategy":"MPS"}`))})
}

// TestMPSDaemonJudgedByAnswers: the daemon of an MPS claim's GPU answers
// once the claim is prepared; when it dies its files stay, yet it counts
// as gone, and the health probe starts a new one; the last claim's
// unprepare makes it quit and removes its pipe directory.
func TestMPSDaemonJudgedByAnswers(t *testing.T) {
	ctx, b := mpsBackend(t)
	resp, err := b.Prepare(ctx, mpsClaim(t, "one", "gpu-1"))
	if err != nil {
		t.Fatal(err)
	}
	g := b.byName["gpu-1"]
	d := b.mpsDaemon(g)
	if got, _ := b.cfg.MPS.List(ctx); !got[g.uuid] {
		t.Fatalf("daemons %v, want gpu-1's answering", got)
	}
	first := daemonPID(t, d.Dir)
	killDaemon(t, first)
	if _, err := os.Stat(filepath.Join(d.PipeDir(), nvmlmock.MPSSocket)); err != nil {
		t.Fatalf("the dead daemon's files: %v", err)
	}
	if got, _ := b.cfg.MPS.List(ctx); got[g.uuid] {
		t.Fatalf("a dead daemon whose files are left counts as running: %v", got)
	}
	b.checkMPS(ctx)
	if got, _ := b.cfg.MPS.List(ctx); !got[g.uuid] {
		t.Fatalf("after the health probe: daemons %v, want gpu-1's answering again", got)
	}
	second := daemonPID(t, d.Dir)
	if second == first || second == 0 {
		t.Fatalf("daemon PIDs %d then %d: not started again", first, second)
	}
	if err := b.Unprepare(ctx, plugin.ClaimRefOf(mpsClaim(t, "one", "gpu-1").Claim), resp.Devices); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.PipeDir()); !os.IsNotExist(err) {
		t.Errorf("pipe directory after the last claim: %v", err)
	}
	if !exited(second) {
		t.Errorf("daemon %d still runs after quit", second)
	}
}

// TestRestartedPluginAfterDeadDaemon: a plugin that restarts (Reconcile
// on a new backend) with an MPS claim prepared and its daemon dead
// starts the daemon again instead of taking the left files for it; a
// daemon nobody uses whose files are left (a reboot) is cleaned up
// without holding start-up.
func TestRestartedPluginAfterDeadDaemon(t *testing.T) {
	ctx, b := mpsBackend(t)
	req := mpsClaim(t, "one", "gpu-1")
	resp, err := b.Prepare(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	used := b.mpsDaemon(b.byName["gpu-1"])
	killDaemon(t, daemonPID(t, used.Dir))
	// A reboot's leftover on another GPU: files, no process.
	unused := b.mpsDaemon(b.byName["gpu-2"])
	if err := os.MkdirAll(unused.PipeDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unused.PipeDir(), nvmlmock.MPSSocket), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	restarted, err := New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	claim := plugin.ClaimState{ClaimRef: plugin.ClaimRefOf(req.Claim), Phase: plugin.PhasePrepareCompleted, Devices: resp.Devices}
	if err := restarted.Reconcile(ctx, []plugin.ClaimState{claim}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	got, _ := restarted.cfg.MPS.List(ctx)
	if !got[used.GPU] {
		t.Errorf("daemons %v: the prepared claim's daemon was not started again", got)
	}
	if _, ok := got[unused.GPU]; ok {
		t.Errorf("daemons %v: the unused leftover is still there", got)
	}
	if _, err := os.Stat(unused.PipeDir()); !os.IsNotExist(err) {
		t.Errorf("leftover pipe directory: %v", err)
	}
}

// TestWedgedMPSDaemonDoesNotHangStartUp: a daemon that stops answering
// is given MPSCallTimeout per call, and start-up goes on.
func TestWedgedMPSDaemonDoesNotHangStartUp(t *testing.T) {
	old := MPSCallTimeout
	MPSCallTimeout = 2 * time.Second
	t.Cleanup(func() { MPSCallTimeout = old })
	ctx, b := mpsBackend(t)
	g := b.byName["gpu-3"]
	d := b.mpsDaemon(g)
	if err := b.cfg.MPS.Ensure(ctx, g.uuid, d.Dir); err != nil {
		t.Fatal(err)
	}
	daemonPID(t, d.Dir)
	if _, err := standInMPS(b.cfg.StateDir).call(ctx, d.PipeDir(), nvmlmock.FakeCommand+" hang 1h"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := b.Reconcile(ctx, nil); err != nil {
		t.Fatalf("reconcile with a wedged daemon: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("reconcile took %s with a wedged daemon", took)
	}
	if _, err := os.Stat(d.PipeDir()); !os.IsNotExist(err) {
		t.Errorf("the unused wedged daemon's pipe directory: %v", err)
	}
}

// kubelet plays the node for PodMPS: it runs the daemon of every daemon
// pod made (with the pod's command's control program) and marks the pod
// running, until ctx ends.
func kubelet(ctx context.Context, t *testing.T, client *fake.Clientset, ns string) {
	for ctx.Err() == nil {
		pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for _, pod := range pods.Items {
			if pod.Status.Phase != "" {
				continue
			}
			cmd := pod.Spec.Containers[0].Command
			dash := slices.Index(cmd, "--")
			var gpu, dir string
			for _, a := range cmd[:dash] {
				if v, ok := strings.CutPrefix(a, "--gpu-uuid="); ok {
					gpu = v
				}
				if v, ok := strings.CutPrefix(a, "--dir="); ok {
					dir = v
				}
			}
			d := MPSDaemon{GPU: gpu, Dir: dir}
			run := exec.Command(cmd[dash+1], append(cmd[dash+2:], "-d")...)
			run.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+d.PipeDir(), "CUDA_MPS_LOG_DIRECTORY="+d.LogDir())
			if out, err := run.CombinedOutput(); err != nil {
				t.Errorf("daemon of pod %s: %v %s", pod.Name, err, out)
			}
			pod.Status.Phase = corev1.PodRunning
			_, _ = client.CoreV1().Pods(ns).UpdateStatus(ctx, &pod, metav1.UpdateOptions{})
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPodMPS: a GPU's daemon runs in a pod of its own bound to the node
// and owned by it, with the daemon's folder from the host at the same
// path and a liveness probe that talks to the daemon; Stop makes it quit
// and deletes the pod; a pod whose daemon quit is replaced.
func TestPodMPS(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	state := t.TempDir()
	p := &PodMPS{
		Exec: standInMPS(state), Client: client, Namespace: "strata", NodeName: "node-a", NodeUID: "node-uid",
		Image: "strata/nvidia-kubelet-plugin:v1", ImagePullSecrets: []string{"regcred"},
		DaemonCommand: []string{"/usr/bin/nvidia-kubelet-plugin", "mps-daemon"}, DriverRoot: "/run/nvidia/driver", PriorityClassName: "system-node-critical",
	}
	go kubelet(ctx, t, client, "strata")
	const gpu = "GPU-1B2C"
	d := MPSDaemon{GPU: gpu, Dir: MPSDir(state, gpu)}
	if err := p.Ensure(ctx, gpu, d.Dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background(), gpu, d.Dir) })
	pod, err := client.CoreV1().Pods("strata").Get(ctx, "strata-mps-gpu-1b2c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := pod.Spec
	c := s.Containers[0]
	switch {
	case s.NodeName != "node-a", s.RestartPolicy != corev1.RestartPolicyOnFailure, s.PriorityClassName != "system-node-critical", !s.HostNetwork:
		t.Errorf("pod placement: node %q restart %q priority %q host network %v", s.NodeName, s.RestartPolicy, s.PriorityClassName, s.HostNetwork)
	case len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "Node" || pod.OwnerReferences[0].UID != "node-uid":
		t.Errorf("owners %v, want the node", pod.OwnerReferences)
	case c.Image != p.Image || len(s.ImagePullSecrets) != 1 || c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged:
		t.Errorf("container image %q, pull secrets %v, security %v", c.Image, s.ImagePullSecrets, c.SecurityContext)
	case pod.Labels[MPSPodNameLabel] != MPSPodName || pod.Labels[MPSPodGPULabel] != gpu:
		t.Errorf("labels %v", pod.Labels)
	case c.LivenessProbe == nil || !slices.Contains(c.LivenessProbe.Exec.Command, "--probe"):
		t.Errorf("liveness probe %v, want the daemon command's --probe", c.LivenessProbe)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range s.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				mounts[v.HostPath.Path] = m.MountPath
			}
		}
	}
	if mounts[d.Dir] != d.Dir || mounts["/run/nvidia/driver"] != MPSDriverRootMount {
		t.Errorf("host paths mounted %v, want the daemon's folder at its own path and the driver root at %s", mounts, MPSDriverRootMount)
	}
	if got, err := p.List(ctx); err != nil || !got[gpu] {
		t.Errorf("List: %v %v, want %s answering", got, err, gpu)
	}

	// The daemon quit behind the plugin's back: the pod ended; Ensure
	// replaces it.
	if _, err := p.Exec.call(ctx, d.PipeDir(), "quit"); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("strata").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Ensure(ctx, gpu, d.Dir); err != nil {
		t.Fatalf("Ensure after the daemon quit: %v", err)
	}
	if err := p.Exec.answers(ctx, d); err != nil {
		t.Fatalf("replaced daemon: %v", err)
	}
	pid := daemonPID(t, d.Dir)

	if err := p.Stop(ctx, gpu, d.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("strata").Get(ctx, "strata-mps-gpu-1b2c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("daemon pod after Stop: %v", err)
	}
	if _, err := os.Stat(d.PipeDir()); !os.IsNotExist(err) {
		t.Errorf("pipe directory after Stop: %v", err)
	}
	if !exited(pid) {
		t.Errorf("daemon %d still runs after Stop", pid)
	}
}

// exited waits a few seconds for process pid to end (quit is
// asynchronous to its reply).
func exited(pid int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return true
		}
	}
	return false
}
