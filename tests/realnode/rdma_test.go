package realnode

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/sim/realnode"
)

var rdmaOnce sync.Once

// TestRDMAVFOnRealNode: the RDMA plugin from its image with the chart's
// simulate value (the HGX H100 whose RoCE NICs have SR-IOV VFs), and the
// vf-vlan example: the container sees the VF's verbs node and the
// connection manager, and NCCL and UCX are pointed at exactly that HCA.
// The VF's settings (VLAN, trust, MTU, rate) go to the simulated
// netlink, which no container can see; the VF's interface is not moved
// into the pod (runc 1.1 has no netDevices, and the interface does not
// exist on this host).
func TestRDMAVFOnRealNode(t *testing.T) {
	e, n := rdmaNode(t)
	pods := applyExample(t, e, n, "rdma/vf-vlan.yaml", `for f in /dev/infiniband/*; do [ -c "$f" ] && echo "dev $f $(stat -c '%t:%T' "$f")"; done; env | grep -E '^(NCCL|UCX)' | sed 's/^/env /'`)
	out := podLogs(t, e.client, pods[0], 3*time.Minute)[pods[0].Spec.Containers[0].Name]
	verbs := regexp.MustCompile(`dev /dev/infiniband/uverbs(\d+) e7:`).FindAllStringSubmatch(out, -1)
	if len(verbs) != 1 {
		t.Fatalf("container sees verbs nodes %q, want its VF's one:\n%s", verbs, out)
	}
	hca := "mlx5_" + verbs[0][1]
	for _, want := range []string{"dev /dev/infiniband/rdma_cm a:3a", "env NCCL_IB_HCA==" + hca, "env UCX_NET_DEVICES=" + hca + ":1"} {
		if !strings.Contains(out, want) {
			t.Errorf("container lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "umad") {
		t.Errorf("a RoCE VF's container sees a MAD node:\n%s", out)
	}
}

// rdmaNode runs the RDMA plugin from its image with the chart's simulate
// value on the real node, once, and waits for its devices.
func rdmaNode(t *testing.T) (*env, *realnode.Node) {
	t.Helper()
	e, n := realNode(t)
	started := false
	rdmaOnce.Do(func() {
		ds := pluginDaemonSet(t, n, "rdma", map[string]any{"plugins": map[string]any{"rdma": map[string]any{"simulate": "nvidia-hgx-h100-cpu-nics"}}})
		e.runPlugin(t, n, ds)
		waitDevices(t, e, n.Name(), rdma.DriverName)
		started = true
	})
	if !started {
		waitDevices(t, e, n.Name(), rdma.DriverName)
	}
	return e, n
}

// TestRDMAPluginRestartKeepsVFSettingsOnRealNode: the VF settings of a
// running pod's claim (the vf-vlan example's VLAN and the rest) stay while
// the plugin's process is killed and restarted, and once the pod goes
// every VF and interface is back at what it was before: no setting is
// left for a claim that no longer exists. The settings are read from the
// simulated NICs' state, which outlives the plugin as the kernel's does.
func TestRDMAPluginRestartKeepsVFSettingsOnRealNode(t *testing.T) {
	e, n := rdmaNode(t)
	ctx := context.Background()
	state := filepath.Join(n.KubeletDir(), "plugins", rdma.DriverName, "simulated", "links.json")
	links := func() string {
		raw, err := os.ReadFile(state)
		if err != nil {
			t.Fatalf("the simulated NICs' state: %v", err)
		}
		return string(raw)
	}
	before := links()
	pods := applyExample(t, e, n, "rdma/vf-vlan.yaml", "echo seen; sleep 3600")
	runningLog(t, e, pods[0], pods[0].Spec.Containers[0].Name, "seen", 3*time.Minute)
	prepared := links()
	if sameLinks(t, prepared, before) {
		t.Fatalf("the VF claim changed no VF setting:\n%s", prepared)
	}
	claim := podClaimUID(t, e, pods[0])

	mirror := "strata-rdma-kubelet-plugin-" + n.Name()
	restartsBefore := restarts(t, e, "strata-system", mirror)
	if killed, err := n.KillProcesses("rdma-kubelet-plugin"); err != nil || killed < 1 {
		t.Fatalf("killed %d plugin processes (%v)", killed, err)
	}
	waitPod(t, e.client, "strata-system", mirror, 2*time.Minute, func(p *corev1.Pod) bool {
		return restartCount(p) > restartsBefore && p.Status.ContainerStatuses[0].State.Running != nil
	})
	waitDevices(t, e, n.Name(), rdma.DriverName)
	if now := links(); !sameLinks(t, now, prepared) {
		t.Errorf("the running pod's VF settings changed when the plugin restarted:\nbefore %s\nafter  %s", prepared, now)
	}

	if err := e.client.CoreV1().Pods(pods[0].Namespace).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return sameLinks(t, links(), before) && len(specsOf(t, n.CDIDir(), claim)) == 0, nil
	})
	if err != nil {
		t.Fatalf("after the pod went the links are\n%s\nwant as before the claim\n%s\n(CDI specs %v)", links(), before, specsOf(t, n.CDIDir(), claim))
	}
}

// sameLinks compares two saved link states.
func sameLinks(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
