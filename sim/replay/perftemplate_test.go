package replay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/linkmock"
	"github.com/strata-sh/strata/internal/nvidiapreset"
)

// The DGX H100 ResourceSlice of the perf suite's Strata workloads is the
// NVIDIA plugin's own for the preset, the GPU UUIDs aside: when the
// plugin's output changes, the template must be written again.
func TestPerfSliceTemplateIsThePluginsOutput(t *testing.T) {
	const path = "../../tests/perf/testdata/strata/templates/resourceslice-dgx-h100.yaml"
	inv, err := nvidiapreset.Discover(context.Background(), "nvidia-dgx-h100", "")
	if err != nil {
		t.Fatal(err)
	}
	want := onlySlice(t, nvidia.DriverName, inv).Spec.DeepCopy()
	for i := range want.Devices {
		want.Devices[i].Attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("GPU-7-%d", i))}
	}
	if diff := cmp.Diff(*want, templateSlice(t, path).Spec); diff != "" {
		t.Errorf("%s differs from what the plugin publishes (-plugin +template):\n%s", path, diff)
	}
}

// The DGX H100 RDMA ResourceSlice of the perf suite's GPU+NIC workload is
// the RDMA plugin's own for the preset (its ConnectX-7 NICs and their
// enabled virtual functions): when the plugin's output changes, the
// template must be written again (STRATA_WRITE_PERF_TEMPLATES=1 writes it).
func TestPerfRDMASliceTemplateIsThePluginsOutput(t *testing.T) {
	const path = "../../tests/perf/testdata/strata/templates/resourceslice-dgx-h100-rdma.yaml"
	m, err := hardware.Lookup("nvidia-dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	b, err := rdma.New(rdma.Config{SysfsRoot: filepath.Join(root, hardware.SysDir), DevRoot: root, Links: linkmock.New(m)})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := b.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	published := onlySlice(t, rdma.DriverName, inv)
	if os.Getenv("STRATA_WRITE_PERF_TEMPLATES") != "" {
		published.TypeMeta = metav1.TypeMeta{Kind: "ResourceSlice", APIVersion: "resource.k8s.io/v1"}
		raw, err := yaml.Marshal(published)
		if err != nil {
			t.Fatal(err)
		}
		text := rdmaTemplateHeader + strings.ReplaceAll(string(raw), "strata-gpu-7", "strata-gpu-{{.Index}}")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(published.Spec, templateSlice(t, path).Spec); diff != "" {
		t.Errorf("%s differs from what the plugin publishes (-plugin +template):\n%s", path, diff)
	}
}

// onlySlice returns the one ResourceSlice a plugin publishes for an
// inventory on node strata-gpu-7.
func onlySlice(t *testing.T, driver string, inv *plugin.Inventory) *resourceapi.ResourceSlice {
	t.Helper()
	published, err := plugin.ResourceSlices(driver, "strata-gpu-7", inv)
	if err != nil {
		t.Fatal(err)
	}
	if len(published) != 1 {
		t.Fatalf("the plugin publishes %d slices for the preset, the template has one", len(published))
	}
	return published[0]
}

// templateSlice reads a perf template's ResourceSlice as the harness
// renders it for node 7.
func templateSlice(t *testing.T, path string) resourceapi.ResourceSlice {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out resourceapi.ResourceSlice
	if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(string(raw), "{{.Index}}", "7")), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

const rdmaTemplateHeader = `# The ResourceSlice the rdma.strata.sh kubelet plugin publishes on an
# NVIDIA DGX H100 (the nvidia-dgx-h100 hardware preset, discovered by the
# plugin's backend with its default options): the ConnectX-7 NICs, each
# under a GPU's PCIe switch, and their enabled virtual functions. GUIDs
# and MACs repeat across nodes, which the scheduler does not read.
# sim/replay's TestPerfRDMASliceTemplateIsThePluginsOutput checks it
# against the plugin (STRATA_WRITE_PERF_TEMPLATES=1 writes it again).
`
