package realnode

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/cambricon"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/sim/realnode"
)

var (
	cambriconOnce sync.Once
	cambriconHW   string
)

// cambriconNode runs the Cambricon plugin from its image on the real
// node, as the chart's DaemonSet would, over a fake MLU370-X8 server: its
// sysfs, /proc/devices and device nodes, and the fake cnmon in the
// driver's place.
func cambriconNode(t *testing.T) (*env, *realnode.Node, string) {
	t.Helper()
	e, n := realNode(t)
	cambriconOnce.Do(func() {
		root := filepath.Join(n.Dir, "hw-mlu")
		m := hardware.MLU370X8()
		if err := hardware.WriteNode(root, m, "5d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"); err != nil {
			t.Fatal(err)
		}
		if err := hardware.WriteDeviceNodes(root, m); err != nil {
			t.Fatal(err)
		}
		cnmon := filepath.Join(root, "usr", "bin", "cnmon")
		if err := os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		bin, err := os.ReadFile(filepath.Join(e.bin, "cnmon"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cnmon, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		settings, _ := json.Marshal(map[string]any{"devices": len(m.MLUs()), "state": filepath.Join(root, "cnmon.state"),
			"devRoot": root, "devChar": filepath.Join(root, hardware.SysDir, "dev", "char")})
		if err := os.WriteFile(cnmon+".json", settings, 0o644); err != nil {
			t.Fatal(err)
		}
		ds := pluginDaemonSet(t, n, "cambricon", map[string]any{"plugins": map[string]any{"cambricon": map[string]any{
			"driver":    map[string]any{"cnmon": cnmon},
			"extraArgs": []any{"--sysfs-root=" + filepath.Join(root, hardware.SysDir), "--proc-root=" + filepath.Join(root, hardware.ProcDir), "--dev-root=" + root},
		}}})
		e.runPlugin(t, n, ds, root)
		waitDevices(t, e, n.Name(), cambricon.DriverName)
		cambriconHW = root
	})
	if cambriconHW == "" {
		t.Fatal("the Cambricon plugin did not start on the real node (see the first Cambricon test's failure)")
	}
	return e, n, cambriconHW
}

const mluScript = `for f in /dev/* /dev/cambricon-caps/*; do [ -c "$f" ] && echo "dev $f $(stat -c '%t:%T' "$f")"; done; ` +
	`env | grep -E '^CAMBRICON' | sed 's/^/env /'; echo seen; sleep 3600`

var mluCard = regexp.MustCompile(`dev /dev/cambricon_dev(\d+) f1:`)

// TestCambriconWholeCardsOnRealNode: the mlu-whole example (two cards of
// one board): the container sees exactly those two cards' device and IPC
// nodes and the control node, and CAMBRICON_VISIBLE_DEVICES names them.
func TestCambriconWholeCardsOnRealNode(t *testing.T) {
	e, n, _ := cambriconNode(t)
	pods := applyExample(t, e, n, "cambricon/mlu-whole.yaml", mluScript)
	out := runningLog(t, e, pods[0], pods[0].Spec.Containers[0].Name, "seen", 3*time.Minute)
	cards := mluCard.FindAllStringSubmatch(out, -1)
	if len(cards) != 2 {
		t.Fatalf("container sees cards %q, want two:\n%s", cards, out)
	}
	var ids []string
	for _, c := range cards {
		ids = append(ids, c[1])
		if !strings.Contains(out, "dev /dev/cambricon_ipcm"+c[1]+" f2:") {
			t.Errorf("card %s's IPC node is missing:\n%s", c[1], out)
		}
	}
	for _, want := range []string{"dev /dev/cambricon_ctl f0:0", "env CAMBRICON_VISIBLE_DEVICES=" + strings.Join(ids, ",")} {
		if !strings.Contains(out, want) {
			t.Errorf("container lacks %q:\n%s", want, out)
		}
	}
}

// TestCambriconSMLUOnRealNode: the smlu example: cnmon makes an sMLU when
// the claim is prepared; the container sees its card and the sMLU's
// capability node and the profile variable; once the pod is gone, the
// sMLU's node and the claim's CDI spec are gone.
func TestCambriconSMLUOnRealNode(t *testing.T) {
	e, n, root := cambriconNode(t)
	pods := applyExample(t, e, n, "cambricon/smlu.yaml", mluScript)
	p := pods[0]
	out := runningLog(t, e, p, p.Spec.Containers[0].Name, "seen", 3*time.Minute)
	caps := regexp.MustCompile(`dev /dev/cambricon-caps/(cap_dev\d+_mi\d+) f3:`).FindAllStringSubmatch(out, -1)
	if len(mluCard.FindAllString(out, -1)) != 1 || len(caps) != 1 {
		t.Fatalf("container sees cards %q and sMLU nodes %q, want one of each:\n%s", mluCard.FindAllString(out, -1), caps, out)
	}
	if !strings.Contains(out, "env CAMBRICON_DSMLU_PROFILE=") {
		t.Errorf("no sMLU profile in the container's environment:\n%s", out)
	}
	hostNode := filepath.Join(root, "dev", "cambricon-caps", caps[0][1])
	if _, err := os.Stat(hostNode); err != nil {
		t.Errorf("the sMLU's node is not on the host: %v", err)
	}
	claimUID := podClaimUID(t, e, p)
	if err := e.client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(hostNode)
		return os.IsNotExist(err) && len(specsOf(t, n.CDIDir(), claimUID)) == 0, nil
	})
	if err != nil {
		t.Errorf("after the pod went, the sMLU's node or the claim's CDI spec stayed: %s, %v", hostNode, specsOf(t, n.CDIDir(), claimUID))
	}
}

// TestCambriconPluginRestartOnRealNode: the Cambricon plugin's process is
// killed while a pod uses an sMLU; the kubelet restarts it. The pod keeps
// its container and its sMLU's node; a new pod gets an sMLU of its own;
// once both pods go, no sMLU, capability node, CDI spec or checkpoint
// entry is left.
func TestCambriconPluginRestartOnRealNode(t *testing.T) {
	e, n, root := cambriconNode(t)
	ctx := context.Background()
	// A share of a card: 10 % of its time, 1 GiB.
	claimTemplate(t, e, "smlu-restart", "cambricon-smlu.strata.sh", "", map[string]string{"vcore": "10", "vmemory": "1Gi"})
	long := func(name string) (string, string) {
		p := createPod(t, e, withClaim(shellPod(name, n.Name(), map[string]string{"main": mluScript}, "busybox"), "smlu-restart", "main"))
		out := runningLog(t, e, p, "main", "seen", 3*time.Minute)
		caps := regexp.MustCompile(`/dev/cambricon-caps/(cap_dev\d+_mi\d+)`).FindAllStringSubmatch(out, -1)
		if len(caps) != 1 {
			t.Fatalf("pod %s sees sMLU nodes %q, want one:\n%s", name, caps, out)
		}
		return podClaimUID(t, e, p), caps[0][1]
	}
	firstClaim, firstCap := long("smlu-before-restart")
	mirror := "strata-cambricon-kubelet-plugin-" + n.Name()
	before := restarts(t, e, "strata-system", mirror)
	if killed, err := n.KillProcesses("cambricon-kubelet-plugin"); err != nil || killed != 1 {
		t.Fatalf("killed %d plugin processes (%v), want 1", killed, err)
	}
	waitPod(t, e.client, "strata-system", mirror, 2*time.Minute, func(p *corev1.Pod) bool {
		return restartCount(p) > before && p.Status.ContainerStatuses[0].State.Running != nil
	})
	secondClaim, secondCap := long("smlu-after-restart")
	if secondCap == firstCap {
		t.Errorf("both pods got sMLU node %s", firstCap)
	}
	if _, err := os.Stat(filepath.Join(root, "dev", "cambricon-caps", firstCap)); err != nil {
		t.Errorf("the running pod's sMLU node went with the plugin restart: %v", err)
	}
	for _, name := range []string{"smlu-before-restart", "smlu-after-restart"} {
		if err := e.client.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := filepath.Join(n.KubeletDir(), "plugins", cambricon.DriverName, "checkpoint.json")
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(checkpoint)
		nodes, _ := filepath.Glob(filepath.Join(root, "dev", "cambricon-caps", "*"))
		return len(nodes) == 0 && len(specsOf(t, n.CDIDir(), firstClaim)) == 0 && len(specsOf(t, n.CDIDir(), secondClaim)) == 0 &&
			!strings.Contains(string(data), firstClaim) && !strings.Contains(string(data), secondClaim), nil
	})
	if err != nil {
		data, _ := os.ReadFile(checkpoint)
		nodes, _ := filepath.Glob(filepath.Join(root, "dev", "cambricon-caps", "*"))
		t.Fatalf("after the pods went: sMLU nodes %v, checkpoint:\n%s", nodes, data)
	}
}
