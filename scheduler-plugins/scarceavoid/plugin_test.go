package scarceavoid

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
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/strata-sh/strata/api/schedulerargs"
	"github.com/strata-sh/strata/internal/testutil"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

type res = map[corev1.ResourceName]string

const gpu = corev1.ResourceName("nvidia.com/gpu")

func TestFormula(t *testing.T) {
	tests := []struct {
		unrequested, scarce, want int64
	}{
		{0, 0, 100},
		{3, 0, 100},
		{1, 1, 0},
		{2, 1, 50},
		{6, 1, 83}, // Koordinator's documented CPU pod on a GPU node
		{3, 2, 33},
	}
	for _, tc := range tests {
		if got := score(tc.unrequested, tc.scarce); got != tc.want {
			t.Errorf("score(%d, %d) = %d, want %d", tc.unrequested, tc.scarce, got, tc.want)
		}
	}
}

// run runs the plugin's PreScore and Score and returns each node's score.
func run(ctx context.Context, t *testing.T, h fwk.Handle, args runtime.Object, pod *corev1.Pod, nodes ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	pl, err := New(ctx, args, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*Plugin)
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
		out[ni.Node().Name] = s
	}
	return out
}

func gpuArgs() *schedulerargs.ScarceResourceAvoidanceArgs {
	return &schedulerargs.ScarceResourceAvoidanceArgs{Resources: []corev1.ResourceName{gpu}}
}

func TestScoreClassic(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes := []fwk.NodeInfo{
		// Koordinator's documented GPU node: six resource types a CPU
		// pod leaves unrequested, one of them scarce.
		dct.NodeInfo(dct.Node("gpu-node", res{
			"cpu": "64", "memory": "256Gi", "ephemeral-storage": "1Ti", "hugepages-2Mi": "1Gi", gpu: "8",
			"kubernetes.io/batch-cpu": "10", "kubernetes.io/batch-memory": "10Gi", "koordinator.sh/gpu-core": "800",
		})),
		dct.NodeInfo(dct.Node("cpu-node", res{"cpu": "64", "memory": "256Gi", "ephemeral-storage": "1Ti"})),
		dct.NodeInfo(dct.Node("small-gpu-node", res{"cpu": "64", "memory": "256Gi", "ephemeral-storage": "1Ti", gpu: "2"})),
		dct.NodeInfo(dct.Node("bare-gpu-node", res{"cpu": "64", "memory": "256Gi", gpu: "2"})),
	}
	tests := map[string]struct {
		pod  *corev1.Pod
		want map[string]int64
	}{
		"CPU pod avoids GPU nodes": {
			pod:  dct.Pod("cpu", res{"cpu": "1", "memory": "1Gi"}),
			want: map[string]int64{"gpu-node": 83, "cpu-node": 100, "small-gpu-node": 50, "bare-gpu-node": 0},
		},
		"GPU pod: nothing scarce is left unrequested": {
			pod:  dct.Pod("gpu", res{"cpu": "1", "memory": "1Gi", gpu: "1"}),
			want: map[string]int64{"gpu-node": 100, "cpu-node": 100, "small-gpu-node": 100, "bare-gpu-node": 100},
		},
		// Types, not amounts: a pod with no requests leaves cpu and
		// memory unrequested too.
		"best-effort pod": {
			pod:  testutil.MakePod("be").Obj(),
			want: map[string]int64{"gpu-node": 87, "cpu-node": 100, "small-gpu-node": 75, "bare-gpu-node": 66},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := run(ctx, t, nil, gpuArgs(), tc.pod, nodes...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

// GPUs published through DRA (Strata's nvidia-gpu.strata.sh class, which
// maps nvidia.com/gpu) make a node a GPU node as well.
func TestScoreDRA(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	class := testutil.StrataClasses(t)["nvidia-gpu.strata.sh"].DeepCopy()
	dra := dct.DRAManager(ctx, t, class, dct.GPUSlice("dra-gpu-node", 8),
		testutil.MakeClaimSpec().Request("gpu", class.Name, 1).Claim("default", "one"),
		testutil.MakeClaimSpec().Request("nic", "rdma-nic.strata.sh", 1).Claim("default", "nic"))
	h, err := frameworkruntime.NewFramework(ctx, nil, nil, frameworkruntime.WithSharedDRAManager(dra))
	if err != nil {
		t.Fatal(err)
	}
	alloc := res{"cpu": "64", "memory": "256Gi", "ephemeral-storage": "1Ti"}
	nodes := []fwk.NodeInfo{
		dct.NodeInfo(dct.Node("dra-gpu-node", alloc)),
		dct.NodeInfo(dct.Node("cpu-node", alloc)),
	}
	byClass := &schedulerargs.ScarceResourceAvoidanceArgs{Resources: []corev1.ResourceName{"nvidia-gpu.strata.sh"}}
	tests := map[string]struct {
		args runtime.Object
		pod  *corev1.Pod
		want map[string]int64
	}{
		// dra-gpu-node: ephemeral-storage and GPUs unrequested, GPUs scarce.
		"CPU pod avoids the node with DRA GPUs": {
			args: gpuArgs(), pod: dct.Pod("cpu", res{"cpu": "1", "memory": "1Gi"}),
			want: map[string]int64{"dra-gpu-node": 50, "cpu-node": 100},
		},
		"a pod claiming a GPU requests them": {
			args: gpuArgs(), pod: testutil.MakePod("p").Req("1", "1Gi").Claim("gpu", "one").Obj(),
			want: map[string]int64{"dra-gpu-node": 100, "cpu-node": 100},
		},
		"a claim of another class does not": {
			args: gpuArgs(), pod: testutil.MakePod("p").Req("1", "1Gi").Claim("nic", "nic").Obj(),
			want: map[string]int64{"dra-gpu-node": 50, "cpu-node": 100},
		},
		"extended-resource mapping requests them": {
			args: gpuArgs(), pod: dct.Pod("p", res{"cpu": "1", "memory": "1Gi", gpu: "1"}),
			want: map[string]int64{"dra-gpu-node": 100, "cpu-node": 100},
		},
		"a DeviceClass named in the args": {
			args: byClass, pod: dct.Pod("cpu", res{"cpu": "1", "memory": "1Gi"}),
			want: map[string]int64{"dra-gpu-node": 50, "cpu-node": 100},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := run(ctx, t, h, tc.args, tc.pod, nodes...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tests := map[string]struct {
		args runtime.Object
		want string
	}{
		"no args": {want: "invalid ScarceResourceAvoidance args: resources: Required value"},
		"duplicate": {
			args: &schedulerargs.ScarceResourceAvoidanceArgs{Resources: []corev1.ResourceName{gpu, gpu}},
			want: `invalid ScarceResourceAvoidance args: resources[1]: Duplicate value: "nvidia.com/gpu"`,
		},
		"other args": {args: &schedulerargs.NodeResourcesFitPlusArgs{}, want: "want args of type ScarceResourceAvoidanceArgs, got *schedulerargs.NodeResourcesFitPlusArgs"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(ctx, tc.args, nil, feature.Features{})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error = %v, want %s", err, tc.want)
			}
		})
	}
}
