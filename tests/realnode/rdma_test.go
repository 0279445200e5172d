package realnode

import (
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-sh/strata/drivers/rdma"
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
	e, n := realNode(t)
	rdmaOnce.Do(func() {
		ds := pluginDaemonSet(t, n, "rdma", map[string]any{"plugins": map[string]any{"rdma": map[string]any{"simulate": "nvidia-hgx-h100-cpu-nics"}}})
		e.runPlugin(t, n, ds)
		waitDevices(t, e, n.Name(), rdma.DriverName)
	})
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
