package fitplus_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/strata-sh/strata/api/schedulerargs"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/fitplus"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

type res = map[corev1.ResourceName]string

const gpu = corev1.ResourceName("nvidia.com/gpu")

// koordinatorArgs are the args of Koordinator's documentation: pack
// GPUs, spread CPU and memory.
func koordinatorArgs() *schedulerargs.NodeResourcesFitPlusArgs {
	return &schedulerargs.NodeResourcesFitPlusArgs{Resources: map[corev1.ResourceName]schedulerargs.ResourcesType{
		gpu:                   {Type: schedulerargs.MostAllocated, Weight: 2},
		corev1.ResourceCPU:    {Type: schedulerargs.LeastAllocated, Weight: 1},
		corev1.ResourceMemory: {Type: schedulerargs.LeastAllocated, Weight: 1},
	}}
}

// score runs the plugin's PreScore and Score and returns each node's score.
func score(ctx context.Context, t *testing.T, h fwk.Handle, args runtime.Object, pod *corev1.Pod, nodes ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	pl, err := fitplus.New(ctx, args, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*fitplus.Plugin)
	state := framework.NewCycleState()
	if st := p.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st.AsError())
	}
	out := map[string]int64{}
	for _, ni := range nodes {
		s, st := p.Score(ctx, state, pod, ni)
		if !st.IsSuccess() {
			t.Fatalf("Score on %s: %v", ni.Node().Name, st.AsError())
		}
		if s < fwk.MinNodeScore || s > fwk.MaxNodeScore {
			t.Errorf("score %d on %s is out of range", s, ni.Node().Name)
		}
		out[ni.Node().Name] = s
	}
	return out
}

// Koordinator's documented case with GPUs from a device plugin: two
// nodes of 8 GPUs, 64 CPUs and 256Gi; node1 runs a pod with 6 GPUs, 16
// CPUs and 64Gi.
func classicNodes() []fwk.NodeInfo {
	alloc := res{"cpu": "64", "memory": "256Gi", gpu: "8"}
	busy := dct.Pod("busy", res{"cpu": "16", "memory": "64Gi", gpu: "6"})
	return []fwk.NodeInfo{
		dct.NodeInfo(dct.Node("node1", alloc), busy),
		dct.NodeInfo(dct.Node("node2", alloc)),
		dct.NodeInfo(dct.Node("cpu-node", res{"cpu": "64", "memory": "256Gi", "example.com/foo": "1"})),
	}
}

func TestScoreClassic(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	noCPU := dct.Pod("no-cpu", res{"memory": "16Gi"})
	noCPU.Spec.Containers = append(noCPU.Spec.Containers, corev1.Container{Name: "sidecar"})
	tests := map[string]struct {
		pod  *corev1.Pod
		want map[string]int64
	}{
		// node1: gpu 8/8 → 100, cpu 44/64 → 68, memory 176/256 → 68:
		// (2·100 + 68 + 68) / 4 = 84. node2: gpu 2/8 → 25, cpu and
		// memory 93: (50 + 93 + 93) / 4 = 59. A node without GPUs
		// scores 0 for them: (0 + 93 + 93) / 4 = 46.
		"GPU pod packs onto the busier GPU node": {
			pod:  dct.Pod("gpu", res{"cpu": "4", "memory": "16Gi", gpu: "2"}),
			want: map[string]int64{"node1": 84, "node2": 59, "cpu-node": 46},
		},
		"CPU pod: GPUs are not scored": {
			pod:  dct.Pod("cpu", res{"cpu": "4", "memory": "16Gi"}),
			want: map[string]int64{"node1": 68, "node2": 93, "cpu-node": 93},
		},
		// Only requested resources are scored; the sidecar's missing
		// memory request does not make it one.
		"only what the pod requests": {
			pod:  noCPU,
			want: map[string]int64{"node1": 68, "node2": 93, "cpu-node": 93},
		},
		"nothing requested scores 100": {
			pod:  testutil.MakePod("best-effort").Obj(),
			want: map[string]int64{"node1": 100, "node2": 100, "cpu-node": 100},
		},
		"resources outside the args are ignored": {
			pod:  dct.Pod("foo", res{"example.com/foo": "1"}),
			want: map[string]int64{"node1": 100, "node2": 100, "cpu-node": 100},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := score(ctx, t, nil, koordinatorArgs(), tc.pod, classicNodes()...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

// The same two nodes, their GPUs published through DRA (Strata's
// nvidia-gpu.strata.sh class, which maps nvidia.com/gpu), 6 of node1's
// allocated to a claim.
func TestScoreDRA(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	class := testutil.StrataClasses(t)["nvidia-gpu.strata.sh"].DeepCopy()
	one := testutil.MakeClaimSpec().Request("gpu", class.Name, 1)
	dra := dct.DRAManager(ctx, t, class,
		dct.GPUSlice("node1", 8), dct.GPUSlice("node2", 8), dct.GPUSlice("node3", 8),
		dct.Allocate(testutil.MakeClaimSpec().Request("gpu", class.Name, 6).Claim("default", "busy"), "node1", dct.Indexes(6)...),
		one.Claim("default", "mine"),
		dct.Allocate(one.Claim("default", "placed"), "node3", 0),
	)
	h, err := frameworkHandle(ctx, t, dra)
	if err != nil {
		t.Fatal(err)
	}
	alloc := res{"cpu": "64", "memory": "256Gi"}
	nodes := func(busy *corev1.Pod) []fwk.NodeInfo {
		return []fwk.NodeInfo{dct.NodeInfo(dct.Node("node1", alloc), busy), dct.NodeInfo(dct.Node("node2", alloc))}
	}
	withNode3 := func(nodes []fwk.NodeInfo) []fwk.NodeInfo {
		placed := testutil.MakePod("placed").Claim("gpu", "placed").Obj()
		return append(nodes, dct.NodeInfo(dct.Node("node3", alloc), placed))
	}
	byClaim := nodes(testutil.MakePod("busy").Req("16", "64Gi").Claim("gpu", "busy").Obj())
	// A pod placed through the extended-resource mapping: its request
	// shows in node1's requested, and its devices are allocated.
	mapped := dct.Pod("busy", res{"cpu": "16", "memory": "64Gi", gpu: "6"})
	mapped.Spec.NodeName = "node1"
	byMapping := nodes(mapped)
	least := &schedulerargs.NodeResourcesFitPlusArgs{Resources: map[corev1.ResourceName]schedulerargs.ResourcesType{gpu: {Type: schedulerargs.LeastAllocated}}}
	byClass := &schedulerargs.NodeResourcesFitPlusArgs{Resources: map[corev1.ResourceName]schedulerargs.ResourcesType{"nvidia-gpu.strata.sh": {Type: schedulerargs.MostAllocated}}}

	tests := map[string]struct {
		args  runtime.Object
		pod   *corev1.Pod
		nodes []fwk.NodeInfo
		want  map[string]int64
	}{
		// node1: gpu 7/8 → 87, cpu and memory 68: (174 + 68 + 68) / 4
		// = 77. node2: gpu 1/8 → 12: (24 + 93 + 93) / 4 = 52.
		"claim for a GPU packs onto the busier node": {
			args: koordinatorArgs(), pod: testutil.MakePod("p").Req("4", "16Gi").Claim("gpu", "mine").Obj(), nodes: byClaim,
			want: map[string]int64{"node1": 77, "node2": 52},
		},
		"extended-resource mapping counts devices once": {
			args: koordinatorArgs(), pod: dct.Pod("p", res{"cpu": "4", "memory": "16Gi", gpu: "1"}), nodes: byMapping,
			want: map[string]int64{"node1": 77, "node2": 52},
		},
		// Its GPU on node3 is counted as allocated already: gpu 6/8,
		// 0/8 and 1/8 (node3's own pod being this one, scored again).
		"allocated claim adds nothing": {
			args: koordinatorArgs(), pod: testutil.MakePod("p").Req("4", "16Gi").Claim("gpu", "placed").Obj(), nodes: withNode3(byClaim),
			want: map[string]int64{"node1": (150 + 68 + 68) / 4, "node2": (0 + 93 + 93) / 4, "node3": (24 + 93 + 93) / 4},
		},
		"LeastAllocated spreads": {
			args: least, pod: testutil.MakePod("p").Claim("gpu", "mine").Obj(), nodes: byClaim,
			want: map[string]int64{"node1": 12, "node2": 87},
		},
		"a DeviceClass named in the args": {
			args: byClass, pod: testutil.MakePod("p").Claim("gpu", "mine").Obj(), nodes: byClaim,
			want: map[string]int64{"node1": 87, "node2": 12},
		},
		"CPU pod: GPUs are not scored": {
			args: koordinatorArgs(), pod: testutil.MakePod("p").Req("4", "16Gi").Obj(), nodes: byClaim,
			want: map[string]int64{"node1": 68, "node2": 93},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := score(ctx, t, h, tc.args, tc.pod, tc.nodes...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	tests := map[string]struct {
		args runtime.Object
		want string
	}{
		"no args": {want: "invalid NodeResourcesFitPlus args: resources: Required value"},
		"misspelt type": {
			args: &schedulerargs.NodeResourcesFitPlusArgs{Resources: map[corev1.ResourceName]schedulerargs.ResourcesType{gpu: {Type: "MostAlocated"}}},
			want: `invalid NodeResourcesFitPlus args: resources[nvidia.com/gpu].type: Unsupported value: "MostAlocated": supported values: "LeastAllocated", "MostAllocated"`,
		},
		"other args": {args: &schedulerargs.ScarceResourceAvoidanceArgs{}, want: "want args of type NodeResourcesFitPlusArgs, got *schedulerargs.ScarceResourceAvoidanceArgs"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := fitplus.New(ctx, tc.args, nil, fts)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error = %v, want %s", err, tc.want)
			}
		})
	}
}

// New works on a copy: the defaults do not change the scheduler's
// configuration object.
func TestNewDefaultsACopy(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	args := &schedulerargs.NodeResourcesFitPlusArgs{Resources: map[corev1.ResourceName]schedulerargs.ResourcesType{"cpu": {Type: schedulerargs.LeastAllocated}}}
	if _, err := fitplus.New(ctx, args, nil, feature.Features{}); err != nil {
		t.Fatal(err)
	}
	if w := args.Resources["cpu"].Weight; w != 0 {
		t.Errorf("args changed: weight %d", w)
	}
}
