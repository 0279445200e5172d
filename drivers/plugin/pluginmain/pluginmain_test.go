package pluginmain

import (
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/strata-sh/strata/drivers/plugin"
)

// TestFlagsBecomeThePluginConfig: what the flags say is what the plugin
// core is configured with.
func TestFlagsBecomeThePluginConfig(t *testing.T) {
	o := NewOptions("gpu.example.com", ":9999")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--node-name=node-a", "--pod-uid=pod-1", "--plugin-data-dir=/data", "--registrar-dir=/reg",
		"--cdi-dir=/cdi", "--boot-id-path=/boot", "--simulate=nvidia-dgx-h100", "--metrics-address="}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.MetricsAddress != "" {
		t.Errorf("metrics address %q, want disabled", o.MetricsAddress)
	}
	want := plugin.Config{DriverName: "gpu.example.com", NodeName: "node-a", RollingUpdateUID: types.UID("pod-1"),
		PluginDataDir: "/data", RegistrarDir: "/reg", CDIDir: "/cdi", BootIDPath: "/boot", Simulated: true}
	if diff := cmp.Diff(want, o.Config("gpu.example.com", nil, nil, nil)); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

// TestValidateNamesTheFlag: every refusal names the flag to change.
func TestValidateNamesTheFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		set  func(*Options)
		want string
	}{
		"no node name":       {func(o *Options) { o.NodeName = "" }, "--node-name"},
		"slash in a pod UID": {func(o *Options) { o.PodUID = "a/b" }, "--pod-uid"},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions("gpu.example.com", "")
			o.NodeName = "node-a"
			tc.set(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestProbeCommandExitCodes: the probe exits 2 when it is used wrongly
// and 1 when no plugin serves from the folder.
func TestProbeCommandExitCodes(t *testing.T) {
	if got := probeMain(nil); got != 2 {
		t.Errorf("probe without --plugin-data-dir exited %d, want 2", got)
	}
	if got := probeMain([]string{"--plugin-data-dir=" + t.TempDir(), "--pod-uid=pod-1"}); got != 1 {
		t.Errorf("probe of a folder no plugin serves from exited %d, want 1", got)
	}
}
