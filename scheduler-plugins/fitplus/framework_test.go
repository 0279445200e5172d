package fitplus_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"

	"github.com/strata-sh/strata/internal/testutil"
	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// koordinatorConfig is Koordinator v1.6's documented configuration.
const koordinatorConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: koord-scheduler
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

var koordinatorScore = []config.Plugin{{Name: "NodeResourcesFitPlus", Weight: 2}, {Name: "ScarceResourceAvoidance", Weight: 2}}

// frameworkHandle is a scheduler framework with the documented
// configuration, as strata-scheduler builds it.
func frameworkHandle(ctx context.Context, t *testing.T, dra fwk.SharedDRAManager) (fwk.Handle, error) {
	t.Helper()
	pc, err := dct.PluginConfig(t, koordinatorConfig)
	if err != nil {
		return nil, err
	}
	return dct.Framework(ctx, t, dct.Profile{Registry: schedulerplugins.Registry(), PluginConfig: pc, PreScore: koordinatorScore, Score: koordinatorScore, DRA: dra})
}

// The documented configuration, loaded by kube-scheduler's loader and
// run by its framework with plugin weights 2, on the documented shape of
// cluster: a GPU pod prefers the node with 6 of 8 GPUs used (the
// documentation's nodes gave NodeResourcesFitPlus 158 against 96), a CPU
// pod the node without GPUs.
func TestKoordinatorConfig(t *testing.T) {
	ctx := context.Background()
	pc, err := dct.PluginConfig(t, koordinatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	f, err := dct.Framework(ctx, t, dct.Profile{Registry: schedulerplugins.Registry(), PluginConfig: pc, PreScore: koordinatorScore, Score: koordinatorScore})
	if err != nil {
		t.Fatal(err)
	}
	// NodeResourcesFitPlus ×2 plus ScarceResourceAvoidance ×2. The GPU
	// nodes offer cpu, memory and GPUs only, so a CPU pod leaves one
	// unrequested type there, and it is scarce: 0.
	tests := map[string]struct {
		pod  *corev1.Pod
		want map[string]int64
	}{
		"GPU pod": {
			pod:  dct.Pod("gpu", res{"cpu": "4", "memory": "16Gi", gpu: "2"}),
			want: map[string]int64{"node1": 2*84 + 2*100, "node2": 2*59 + 2*100, "cpu-node": 2*46 + 2*100},
		},
		"CPU pod": {
			pod:  dct.Pod("cpu", res{"cpu": "4", "memory": "16Gi"}),
			want: map[string]int64{"node1": 2*68 + 2*0, "node2": 2*93 + 2*0, "cpu-node": 2*93 + 2*100},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := dct.Scores(ctx, t, f, tc.pod, classicNodes())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("total scores (-want +got):\n%s", diff)
			}
		})
	}
}

// An invalid field stops the profile from being built, and the error
// names the field.
func TestInvalidArgsStopTheScheduler(t *testing.T) {
	tests := map[string]struct{ old, new, want string }{
		"misspelt type": {
			old:  "{type: MostAllocated, weight: 2}",
			new:  "{type: MostAlocated, weight: 2}",
			want: `initializing plugin "NodeResourcesFitPlus": invalid NodeResourcesFitPlus args: resources[nvidia.com/gpu].type: Unsupported value: "MostAlocated": supported values: "LeastAllocated", "MostAllocated"`,
		},
		"weight out of range": {
			old:  "{type: LeastAllocated, weight: 1}",
			new:  "{type: LeastAllocated, weight: 1000}",
			want: `invalid NodeResourcesFitPlus args: resources[cpu].weight: Invalid value: 1000: must be between 1 and 100`,
		},
		"duplicate scarce resource": {
			old:  "resources: [nvidia.com/gpu]",
			new:  "resources: [nvidia.com/gpu, nvidia.com/gpu]",
			want: `initializing plugin "ScarceResourceAvoidance": invalid ScarceResourceAvoidance args: resources[1]: Duplicate value: "nvidia.com/gpu"`,
		},
		"no scarce resource": {
			old:  "resources: [nvidia.com/gpu]",
			new:  "resources: []",
			want: `invalid ScarceResourceAvoidance args: resources: Required value`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pc, err := dct.PluginConfig(t, strings.Replace(koordinatorConfig, tc.old, tc.new, 1))
			if err != nil {
				t.Fatal(err)
			}
			_, err = dct.Framework(context.Background(), t, dct.Profile{Registry: schedulerplugins.Registry(), PluginConfig: pc, PreScore: koordinatorScore, Score: koordinatorScore})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %s", err, tc.want)
			}
		})
	}
}

// Koordinator's documented configuration enables the plugins at score
// only, so kube-scheduler never calls their PreScore: Score prepares the
// cycle's state itself (once, for the snapshot's nodes) and scores the
// same. Here with GPUs published through DRA, 6 of node1's allocated.
func TestScoreWithoutPreScore(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	class := testutil.StrataClasses(t)["nvidia-gpu.strata.sh"].DeepCopy()
	dra := dct.DRAManager(ctx, t, class, dct.GPUSlice("node1", 8), dct.GPUSlice("node2", 8),
		dct.Allocate(testutil.MakeClaimSpec().Request("gpu", class.Name, 6).Claim("default", "busy"), "node1", dct.Indexes(6)...),
		testutil.MakeClaimSpec().Request("gpu", class.Name, 1).Claim("default", "mine"))
	busy := testutil.MakePod("busy").Req("16", "64Gi").Claim("gpu", "busy").Obj()
	busy.Spec.NodeName = "node1"
	alloc := res{"cpu": "64", "memory": "256Gi"}
	nodes := []*corev1.Node{dct.Node("node1", alloc), dct.Node("node2", alloc), dct.Node("cpu-node", alloc)}
	snapshot := cache.NewSnapshot([]*corev1.Pod{busy}, nodes)
	infos, err := snapshot.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := dct.PluginConfig(t, koordinatorConfig)
	if err != nil {
		t.Fatal(err)
	}
	// NodeResourcesFitPlus ×2 plus ScarceResourceAvoidance ×2. The GPU
	// pod: 77, 52 and 46 (no GPUs), and nothing scarce unrequested. The
	// CPU pod: 68, 93, 93, and the DRA GPUs are its only unrequested
	// type on node1 and node2: 0.
	want := map[string]map[string]int64{
		"GPU pod": {"node1": 2*77 + 2*100, "node2": 2*52 + 2*100, "cpu-node": 2*46 + 2*100},
		"CPU pod": {"node1": 2*68 + 2*0, "node2": 2*93 + 2*0, "cpu-node": 2*93 + 2*100},
	}
	pods := map[string]*corev1.Pod{
		"GPU pod": testutil.MakePod("p").Req("4", "16Gi").Claim("gpu", "mine").Obj(),
		"CPU pod": testutil.MakePod("p").Req("4", "16Gi").Obj(),
	}
	for _, variant := range []struct {
		name     string
		preScore []config.Plugin
	}{{"with PreScore", koordinatorScore}, {"score only", nil}} {
		f, err := dct.Framework(ctx, t, dct.Profile{
			Registry: schedulerplugins.Registry(), PluginConfig: pc,
			PreScore: variant.preScore, Score: koordinatorScore, DRA: dra, Snapshot: snapshot,
		})
		if err != nil {
			t.Fatal(err)
		}
		for name, pod := range pods {
			t.Run(variant.name+"/"+name, func(t *testing.T) {
				got := dct.Scores(ctx, t, f, pod, infos)
				if diff := cmp.Diff(want[name], got); diff != "" {
					t.Errorf("total scores (-want +got):\n%s", diff)
				}
			})
		}
	}
}
