package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/realnode"
	"github.com/strata-sh/strata/sim/report"
)

// TestStrataSimRunWithRealNodes: strata-sim run on the demo's cluster
// file with real nodes (cluster-real.yaml) and demo workloads that need
// them: the MIG pod lands on the real DGX A100, the NPU pod on the real
// Atlas, the sMLU pod on the real MLU370 server; each runs for real, and
// the report lists what each container saw, read from the container.
func TestStrataSimRunWithRealNodes(t *testing.T) {
	e := suite(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	examples := filepath.Join(root, "deployments", "examples")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "srs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	err = sim.Run(ctx, sim.RunOptions{
		ClusterFile: filepath.Join(examples, "demo", "cluster-real.yaml"),
		Manifests: []string{filepath.Join(examples, "nvidia", "mig.yaml"), filepath.Join(examples, "ascend", "npu-whole.yaml"),
			filepath.Join(examples, "cambricon", "smlu.yaml")},
		Once: true, Format: sim.FormatJSON, Out: &out, Timeout: 3 * time.Minute, Quiet: 2 * time.Second, Dir: dir,
		RealNodeTools: os.Getenv(realnode.ToolsEnv), PluginBinDir: e.bin,
	})
	if err != nil {
		t.Fatalf("strata-sim run: %v", err)
	}
	var r report.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	want := map[string]struct{ node, device string }{
		"mig-inference":          {"dgx-a100-0", "/dev/nvidia-caps/nvidia-cap"},
		"npu-trainer":            {"atlas-a2-0", "/dev/davinci"},
		"test-cambricon-partial": {"mlu370-0", "/dev/cambricon-caps/cap_dev"},
	}
	for _, p := range r.Pods {
		w, ok := want[p.Name]
		if !ok {
			continue
		}
		delete(want, p.Name)
		if p.Node != w.node || p.Phase != "Running" {
			t.Errorf("pod %s is %s on %q, want Running on %s (%s: %s)", p.Name, p.Phase, p.Node, w.node, p.Reason, p.Message)
			continue
		}
		if len(p.Containers) == 0 {
			t.Errorf("pod %s: the report shows nothing its containers saw", p.Name)
		}
		for name, c := range p.Containers {
			if !c.Observed || !strings.Contains(strings.Join(c.DeviceNodes, " "), w.device) {
				t.Errorf("pod %s container %s saw %+v, want a device under %s reported by the container", p.Name, name, c, w.device)
			}
		}
	}
	for name := range want {
		t.Errorf("pod %s is not in the report", name)
	}
}
