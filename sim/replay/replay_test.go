package replay

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-sh/strata/scheduler-plugins/fragment"
)

// traceDir is where the openb trace is kept beside the repository; tests
// that need it skip without it.
const traceDir = "../../../shared/data/openb"

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadPods(t *testing.T) {
	p := writeFile(t, t.TempDir(), "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"+
		"a,12000,16384,1,460,\nb,4000,8192,0,0,\nc,32000,65536,8,1000,V100M16|V100M32\nd,1000,1024,2,500,\n")
	pods, err := ReadPods(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 4 || pods[0].GPUMilli() != 460 || pods[1].GPUMilli() != 0 || pods[2].GPUMilli() != 8000 || len(pods[2].Models) != 2 {
		t.Fatalf("pods %+v", pods)
	}
	// Several GPUs are whole, whatever gpu_milli says.
	if pods[3].GPUMilli() != 2000 {
		t.Errorf("a two-GPU pod asks %d milli, want 2000", pods[3].GPUMilli())
	}
	bad := writeFile(t, t.TempDir(), "bad.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,0\n")
	if _, err := ReadPods(bad); err == nil {
		t.Error("a one-GPU pod with gpu_milli 0 was accepted")
	}
	missing := writeFile(t, t.TempDir(), "missing.csv", "name,cpu_milli,num_gpu,gpu_milli\n")
	if _, err := ReadPods(missing); err == nil {
		t.Error("a pod list without memory_mib was accepted")
	}
}

// Until keeps the sample's first pods up to the one whose arrival
// reaches the percent, so that the figure at 100 % arrived is the whole
// sample's; at 130 it keeps everything.
func TestUntilKeepsThePrefix(t *testing.T) {
	pods := []TracePod{{GPUs: 1, Milli: 500}, {GPUs: 0}, {GPUs: 2, Milli: 1000}}
	s := Sample(pods, 100_000, 42)
	if got := Until(s, 100_000, 130); len(got) != len(s) {
		t.Errorf("until 130 kept %d of %d pods", len(got), len(s))
	}
	got := Until(s, 100_000, 100)
	var arrived int64
	for _, p := range got {
		arrived += p.GPUMilli()
	}
	if arrived < 100_000 || arrived-got[len(got)-1].GPUMilli() >= 100_000 || len(got) >= len(s) {
		t.Errorf("until 100 kept %d of %d pods, %d milli arrived; want the first reaching 100000", len(got), len(s), arrived)
	}
	full, prefix := NewCurve(100_000), NewCurve(100_000)
	for i, p := range s {
		placed := i%3 != 0
		full.Add(p, placed)
		if i < len(got) {
			prefix.Add(p, placed)
		}
	}
	if full.At100 != prefix.At100 {
		t.Errorf("unallocated at 100 %% arrived: %v for the prefix, %v for the whole sample", prefix.At100, full.At100)
	}
}

func TestSampleReachesTheInflation(t *testing.T) {
	pods := []TracePod{{GPUs: 1, Milli: 500}, {GPUs: 0}, {GPUs: 2, Milli: 1000}}
	s := Sample(pods, 100_000, 42)
	var demand int64
	for _, p := range s {
		demand += p.GPUMilli()
	}
	if demand < 130_000 || demand-s[len(s)-1].GPUMilli() >= 130_000 {
		t.Errorf("sampled demand %d, want the first draw reaching 130000", demand)
	}
	again := Sample(pods, 100_000, 42)
	if len(again) != len(s) {
		t.Error("the same seed drew a different sample")
	}
}

func TestCurveAt100(t *testing.T) {
	c := NewCurve(4000)
	c.Add(TracePod{GPUs: 1, Milli: 1000}, true)
	c.Add(TracePod{GPUs: 2, Milli: 1000}, false)
	c.Add(TracePod{GPUs: 1, Milli: 1000}, true)
	// 4000 arrived, 2000 placed.
	if c.At100 != 50 {
		t.Errorf("At100 %v, want 50", c.At100)
	}
	if u := c.Unallocated(); u[25] != 75 || u[100] != 50 {
		t.Errorf("curve at 25 %% %v, at 100 %% %v", u[25], u[100])
	}
}

// The model engine on a slice of the real trace: every policy places
// pods, and Strata's leaves no more unallocated than random placement.
func TestModelOnTheTrace(t *testing.T) {
	nodes, pods := readTrace(t, "default")
	nodes = nodes[:120]
	got := map[string]float64{}
	for _, pol := range slices.Concat(ModelPolicies, StudyPolicies) {
		r, err := RunModel(nodes, pods, pol, 42)
		if err != nil {
			t.Fatal(err)
		}
		got[pol] = r.Curve.At100
	}
	if got[PolicyStrata] > got[PolicyRandom] {
		t.Errorf("unallocated at 100 %%: %v; Strata's is above random's", got)
	}
	t.Logf("unallocated at 100 %% on 120 nodes: %v", got)
}

// A share may take any GPU with room, one per free amount, first fit's
// first; other tasks have only first fit's GPUs.
func TestShareChoices(t *testing.T) {
	n := &fragment.Node{CPU: 64000, Memory: 1 << 40, GPUs: []int32{200, 1000, 300, 1000, 600, 300}}
	for _, tc := range []struct {
		task fragment.Task
		want [][]int
	}{
		{fragment.Task{GPUs: 1, Milli: 300}, [][]int{{1}, {2}, {4}}},
		{fragment.Task{GPUs: 1, Milli: 700}, [][]int{{1}}},
		{fragment.Task{GPUs: 2, Milli: fragment.Whole}, [][]int{{1, 3}}},
	} {
		first, ok := fragment.FirstFit(n, tc.task)
		if !ok {
			t.Fatalf("%+v does not fit", tc.task)
		}
		got := shareChoices(n, tc.task, first)
		if !slices.EqualFunc(got, tc.want, func(f fragment.Fit, want []int) bool { return slices.Equal(f.GPUs, want) }) {
			t.Errorf("%+v: choices %v, want %v", tc.task, got, tc.want)
		}
	}
}

// readTrace reads the openb node list and a variant's pods, or skips the
// test when the trace is not beside the repository.
func readTrace(t *testing.T, variant string) ([]TraceNode, []TracePod) {
	t.Helper()
	if _, err := os.Stat(traceDir); err != nil {
		t.Skip("no openb trace beside the repository")
	}
	nodes, err := ReadNodes(filepath.Join(traceDir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ReadPods(filepath.Join(traceDir, "openb_pod_list_"+variant+".csv"))
	if err != nil {
		t.Fatal(err)
	}
	return nodes, pods
}
