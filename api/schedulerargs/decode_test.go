package schedulerargs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/strata-sh/strata/api/schedulerargs"
)

// koordinatorConfig is Koordinator v1.6's documented configuration of
// the two plugins, with pluginConfig as the issue gives it.
const koordinatorConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: koord-scheduler
  plugins:
    score:
      enabled:
      - name: NodeResourcesFitPlus
        weight: 2
      - name: ScarceResourceAvoidance
        weight: 2
  pluginConfig:
  - name: NodeResourcesFitPlus
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitPlusArgs
      resources:
        nvidia.com/gpu: {type: MostAllocated, weight: 2}
        cpu: {type: LeastAllocated, weight: 1}
        memory: {type: LeastAllocated, weight: 1}
  - name: ScarceResourceAvoidance
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: ScarceResourceAvoidanceArgs
      resources: [nvidia.com/gpu]
`

// load runs kube-scheduler's own config loader on a file.
func load(t *testing.T, doc string) (*schedconfig.KubeSchedulerConfiguration, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	return options.LoadConfigFromFile(logger, path)
}

// argsOf returns the decoded args of a plugin in the first profile.
func argsOf(t *testing.T, cfg *schedconfig.KubeSchedulerConfiguration, plugin string) runtime.Object {
	t.Helper()
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == plugin {
			return pc.Args
		}
	}
	t.Fatalf("no pluginConfig for %s", plugin)
	return nil
}

func TestLoadKoordinatorConfig(t *testing.T) {
	cfg, err := load(t, koordinatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	wantFit := &schedulerargs.NodeResourcesFitPlusArgs{Resources: map[corev1.ResourceName]schedulerargs.ResourcesType{
		"nvidia.com/gpu": {Type: schedulerargs.MostAllocated, Weight: 2},
		"cpu":            {Type: schedulerargs.LeastAllocated, Weight: 1},
		"memory":         {Type: schedulerargs.LeastAllocated, Weight: 1},
	}}
	if diff := cmp.Diff(wantFit, argsOf(t, cfg, "NodeResourcesFitPlus")); diff != "" {
		t.Errorf("NodeResourcesFitPlus args (-want +got):\n%s", diff)
	}
	wantScarce := &schedulerargs.ScarceResourceAvoidanceArgs{Resources: []corev1.ResourceName{"nvidia.com/gpu"}}
	if diff := cmp.Diff(wantScarce, argsOf(t, cfg, "ScarceResourceAvoidance")); diff != "" {
		t.Errorf("ScarceResourceAvoidance args (-want +got):\n%s", diff)
	}
}

func TestLoadDefaultsWeight(t *testing.T) {
	doc := strings.Replace(koordinatorConfig, "cpu: {type: LeastAllocated, weight: 1}", "cpu: {type: LeastAllocated}", 1)
	doc = strings.Replace(doc, "memory: {type: LeastAllocated, weight: 1}", "memory: {type: LeastAllocated, weight: 0}", 1)
	cfg, err := load(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	got := argsOf(t, cfg, "NodeResourcesFitPlus").(*schedulerargs.NodeResourcesFitPlusArgs)
	for name, want := range map[corev1.ResourceName]int64{"cpu": 1, "memory": 1, "nvidia.com/gpu": 2} {
		if w := got.Resources[name].Weight; w != want {
			t.Errorf("weight of %s = %d, want %d", name, w, want)
		}
	}
}

// A plugin enabled without pluginConfig gets empty (defaulted) args,
// which the plugin then refuses as incomplete rather than scoring
// blindly.
func TestLoadWithoutPluginConfig(t *testing.T) {
	doc, _, _ := strings.Cut(koordinatorConfig, "  pluginConfig:")
	cfg, err := load(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := argsOf(t, cfg, "NodeResourcesFitPlus").(*schedulerargs.NodeResourcesFitPlusArgs); !ok {
		t.Errorf("NodeResourcesFitPlus args are %T", argsOf(t, cfg, "NodeResourcesFitPlus"))
	}
	if _, ok := argsOf(t, cfg, "ScarceResourceAvoidance").(*schedulerargs.ScarceResourceAvoidanceArgs); !ok {
		t.Errorf("ScarceResourceAvoidance args are %T", argsOf(t, cfg, "ScarceResourceAvoidance"))
	}
}

func TestLoadRejects(t *testing.T) {
	tests := map[string]struct {
		old, new string
		want     string
	}{
		"unknown field": {
			old:  "cpu: {type: LeastAllocated, weight: 1}",
			new:  "cpu: {type: LeastAllocated, wieght: 1}",
			want: `unknown field "resources.cpu.wieght"`,
		},
		"unknown top-level field": {
			old:  "resources: [nvidia.com/gpu]",
			new:  "resources: [nvidia.com/gpu]\n      scarce: true",
			want: `unknown field "scarce"`,
		},
		"kind without Args (a typo in Koordinator's docs)": {
			old:  "kind: NodeResourcesFitPlusArgs",
			new:  "kind: NodeResourcesFitPlus",
			want: `no kind "NodeResourcesFitPlus" is registered`,
		},
		"list where a map belongs": {
			old:  "resources: [nvidia.com/gpu]",
			new:  "resources: {nvidia.com/gpu: {}}",
			want: "cannot unmarshal object into Go struct field ScarceResourceAvoidanceArgs.resources",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(koordinatorConfig, tc.old, tc.new, 1)
			if doc == koordinatorConfig {
				t.Fatalf("%q not in the document", tc.old)
			}
			_, err := load(t, doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The scheduler writes its effective configuration back out (at -v=2 or
// with --write-config-to): the args must encode as v1 and read back the
// same.
func TestEncodeRoundTrip(t *testing.T) {
	cfg, err := load(t, koordinatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeYAML)
	if !ok {
		t.Fatal("no YAML serializer")
	}
	var buf bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, configv1.SchemeGroupVersion).Encode(cfg, &buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: NodeResourcesFitPlusArgs", "kind: ScarceResourceAvoidanceArgs", "apiVersion: kubescheduler.config.k8s.io/v1"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("encoded config lacks %q:\n%s", want, buf.String())
		}
	}
	again, err := load(t, buf.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, plugin := range []string{"NodeResourcesFitPlus", "ScarceResourceAvoidance"} {
		if diff := cmp.Diff(argsOf(t, cfg, plugin), argsOf(t, again, plugin)); diff != "" {
			t.Errorf("%s args after a round trip (-before +after):\n%s", plugin, diff)
		}
	}
}
