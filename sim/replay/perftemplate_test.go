package replay

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/plugin"
)

// The DGX H100 ResourceSlice of the perf suite's Strata workloads is the
// NVIDIA plugin's own for the preset, the GPU UUIDs aside: when the
// plugin's output changes, the template must be written again.
func TestPerfSliceTemplateIsThePluginsOutput(t *testing.T) {
	raw, err := os.ReadFile("../../tests/perf/testdata/strata/templates/resourceslice-dgx-h100.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got resourceapi.ResourceSlice
	if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(string(raw), "{{.Index}}", "7")), &got); err != nil {
		t.Fatal(err)
	}
	inv, err := discover(context.Background(), "nvidia-dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	published, err := plugin.ResourceSlices(nvidia.DriverName, "strata-gpu-7", inv)
	if err != nil {
		t.Fatal(err)
	}
	if len(published) != 1 {
		t.Fatalf("the plugin publishes %d slices for the preset, the template has one", len(published))
	}
	want := published[0].Spec.DeepCopy()
	for i := range want.Devices {
		want.Devices[i].Attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("GPU-7-%d", i))}
	}
	if diff := cmp.Diff(*want, got.Spec); diff != "" {
		t.Errorf("tests/perf/testdata/strata/templates/resourceslice-dgx-h100.yaml differs from what the plugin publishes (-plugin +template):\n%s", diff)
	}
}
