package replay

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/deployments"
	"github.com/strata-sh/strata/drivers/nvidia"
	schedconfig "github.com/strata-sh/strata/scheduler-plugins/config"
)

// syntheticNodes is a small cluster of three GPU models and a CPU-only
// node.
var syntheticNodes = []TraceNode{
	{Name: "t4", CPU: 16000, Memory: 65536, GPUs: 2, Model: "T4"},
	{Name: "v100", CPU: 32000, Memory: 131072, GPUs: 4, Model: "V100M32"},
	{Name: "g2", CPU: 96000, Memory: 262144, GPUs: 8, Model: "G2"},
	{Name: "cpu", CPU: 64000, Memory: 262144},
}

// testContext logs to the test at verbosity 2: the scheduler's V(5)
// logs of every node of every pod would take most of a test's time.
func testContext(t *testing.T) context.Context {
	return klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
}

func buildCluster(t *testing.T, nodes []TraceNode) *Cluster {
	t.Helper()
	ctx := testContext(t)
	c, err := BuildCluster(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A hand-made sample on the synthetic cluster: every pod that can fit is
// placed where only it can go, shares pack onto one GPU, and the claims
// are allocated as the pods' nodes say.
func TestFrameworkPlacesClaimsOnTheirNodes(t *testing.T) {
	c := buildCluster(t, syntheticNodes)
	sample := []TracePod{
		{Name: "eight", CPU: 8000, Memory: 1024, GPUs: 8, Milli: 1000}, // only g2 has 8 GPUs
		{Name: "cpu-only", CPU: 1000, Memory: 1024},                    // anywhere
		{Name: "v100-whole", CPU: 1000, Memory: 1024, GPUs: 2, Milli: 1000, Models: []string{"V100M32"}},
		{Name: "t4-share-a", CPU: 1000, Memory: 1024, GPUs: 1, Milli: 600, Models: []string{"T4"}},
		{Name: "t4-share-b", CPU: 1000, Memory: 1024, GPUs: 1, Milli: 400, Models: []string{"T4"}},
		{Name: "t4-share-c", CPU: 1000, Memory: 1024, GPUs: 1, Milli: 500, Models: []string{"T4"}}, // second T4 GPU
		{Name: "t4-share-d", CPU: 1000, Memory: 1024, GPUs: 1, Milli: 600, Models: []string{"T4"}}, // fits no T4 GPU
		{Name: "a10", CPU: 1000, Memory: 1024, GPUs: 1, Milli: 1000, Models: []string{"A10"}},      // no A10 here
		{Name: "any-share", CPU: 1000, Memory: 1024, GPUs: 1, Milli: 250},
		{Name: "too-much-cpu", CPU: 200000, Memory: 1024, GPUs: 1, Milli: 1000},
	}
	if want := []string{"G2", "V100M32", "T4"}; !cmp.Equal(c.ModelOrder, want) {
		t.Errorf("models in order %v, want %v (most GPUs first)", c.ModelOrder, want)
	}
	ctx := testContext(t)
	for _, profile := range FrameworkProfiles {
		t.Run(profile, func(t *testing.T) {
			prof := loadProfile(t, profile)
			res, s, err := replayFramework(ctx, c, sample, prof, 42, 2)
			if err != nil {
				t.Fatal(err)
			}
			checkReplay(t, c, sample, res, s)
			for i, want := range map[int]string{0: "g2", 2: "v100", 3: "t4", 4: "t4", 5: "t4", 6: "", 7: "", 9: ""} {
				if got := res.Nodes[i]; got != want {
					t.Errorf("pod %s placed on %q, want %q", sample[i].Name, got, want)
				}
			}
			if res.Nodes[1] == "" || res.Nodes[8] == "" {
				t.Errorf("pods placed on %q", res.Nodes)
			}
			again, _, err := replayFramework(ctx, c, sample, prof, 42, 1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(res.Nodes, again.Nodes); diff != "" {
				t.Errorf("the same seed placed pods elsewhere (-first +second):\n%s", diff)
			}
		})
	}
}

// The framework engine on a slice of the real trace: what the curve
// counts is what the claims hold, and no GPU is over-committed.
func TestFrameworkOnTheTrace(t *testing.T) {
	nodes, pods := readTrace(t, "gpuspec20")
	// Every 30th node: all models, 41 nodes.
	some := everyKth(nodes, 30)
	c := buildCluster(t, some)
	ctx := testContext(t)
	sample := Sample(pods, c.TotalMilli, 7)
	res, s, err := replayFramework(ctx, c, sample, loadProfile(t, ProfileDefault), 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkReplay(t, c, sample, res, s)
	t.Logf("%d nodes, %d pods, %d placed, unallocated at 100 %%: %.2f %%", len(some), len(sample), len(sample)-res.Failed, res.Curve.At100)

	// StrataDeviceFit changes no placement: the same seed without it
	// finds the same feasible nodes for every pod and places every pod
	// where it did.
	without := loadProfile(t, ProfileDefault)
	dropPlugin(without.Plugins, "StrataDeviceFit")
	plain, _, err := replayFramework(ctx, c, sample, without, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plain.Feasible, res.Feasible); diff != "" {
		t.Errorf("feasible nodes per pod differ with StrataDeviceFit (-without +with):\n%s", diff)
	}
	if diff := cmp.Diff(plain.Nodes, res.Nodes); diff != "" {
		t.Errorf("placements differ with StrataDeviceFit (-without +with):\n%s", diff)
	}
}

// everyKth keeps every k-th node of a node list, the first included: a
// smaller cluster with the same mix of models.
func everyKth(nodes []TraceNode, k int) []TraceNode {
	var some []TraceNode
	for i := 0; i < len(nodes); i += k {
		some = append(some, nodes[i])
	}
	return some
}

func loadProfile(t *testing.T, name string) *config.KubeSchedulerProfile {
	t.Helper()
	prof, err := LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return prof
}

// dropPlugin removes a plugin from a profile's multiPoint and filter
// plugins.
func dropPlugin(p *config.Plugins, name string) {
	for _, set := range []*config.PluginSet{&p.MultiPoint, &p.Filter} {
		set.Enabled = slices.DeleteFunc(set.Enabled, func(e config.Plugin) bool { return e.Name == name })
	}
}

// checkReplay checks a replay's outcome against the claims in its
// clientset: every placed GPU pod's claim is allocated on its node's
// GPUs and reserved for it, every other claim is not allocated, no GPU
// gives more cores or memory than it has, no node more CPU or memory,
// and the curve counts the GPU the claims hold.
func checkReplay(t *testing.T, c *Cluster, sample []TracePod, res *FrameworkResult, s *scheduler) {
	t.Helper()
	if res.Errors > 0 {
		t.Fatalf("%d scheduler errors, first %v", res.Errors, res.FirstErrors)
	}
	type device struct{ pool, name string }
	capacity := map[device]map[resourceapi.QualifiedName]resource.Quantity{}
	for _, sl := range c.Slices {
		for _, d := range sl.Spec.Devices {
			capacity[device{sl.Spec.Pool.Name, d.Name}] = map[resourceapi.QualifiedName]resource.Quantity{"cores": d.Capacity["cores"].Value, "memory": d.Capacity["memory"].Value}
		}
	}
	list, err := s.client.ResourceV1().ResourceClaims(replayNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	for i := range list.Items {
		claims[list.Items[i].Name] = &list.Items[i]
	}
	used := map[device]map[resourceapi.QualifiedName]int64{}
	nodeCPU, nodeMem := map[string]int64{}, map[string]int64{}
	var placedMilli, claimedMilli int64
	for i, p := range sample {
		node := res.Nodes[i]
		if node != "" {
			placedMilli += p.GPUMilli()
			nodeCPU[node] += p.CPU
			nodeMem[node] += p.Memory
		}
		if p.GPUs == 0 {
			continue
		}
		claim := claims[claimName(i)]
		if claim == nil {
			t.Fatalf("pod %d has no claim", i)
		}
		alloc := claim.Status.Allocation
		if node == "" {
			if alloc != nil {
				t.Errorf("pod %d (%s) was not placed but its claim is allocated", i, p.Name)
			}
			continue
		}
		if alloc == nil {
			t.Errorf("pod %d (%s) was placed on %s but its claim is not allocated", i, p.Name, node)
			continue
		}
		if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].Name != podObject(i, p).Name {
			t.Errorf("claim of pod %d reserved for %v", i, claim.Status.ReservedFor)
		}
		if want := []string{node}; !cmp.Equal(nodeSelectorNames(alloc.NodeSelector), want) {
			t.Errorf("claim of pod %d on %s has node selector %v", i, node, alloc.NodeSelector)
		}
		if want := max(1, p.GPUs*p.Milli/1000); len(alloc.Devices.Results) != want {
			t.Errorf("claim of pod %d (%d GPUs, %d milli) got %d devices", i, p.GPUs, p.Milli, len(alloc.Devices.Results))
		}
		for _, r := range alloc.Devices.Results {
			d := device{r.Pool, r.Device}
			if r.Driver != nvidia.DriverName || r.Pool != node || capacity[d] == nil {
				t.Errorf("claim of pod %d on %s got %s/%s/%s", i, node, r.Driver, r.Pool, r.Device)
				continue
			}
			if used[d] == nil {
				used[d] = map[resourceapi.QualifiedName]int64{}
			}
			cores, mem := r.ConsumedCapacity["cores"], r.ConsumedCapacity["memory"]
			used[d]["cores"] += cores.Value()
			used[d]["memory"] += mem.Value()
			full := capacity[d]["memory"]
			if mem.Cmp(full) == 0 {
				claimedMilli += 1000
			} else {
				claimedMilli += 10 * cores.Value()
			}
		}
	}
	for d, u := range used {
		for name, v := range u {
			if limit := capacity[d][name]; v > limit.Value() {
				t.Errorf("%s/%s gives %d %s of %s", d.pool, d.name, v, name, limit.String())
			}
		}
	}
	for _, n := range c.Nodes {
		if cpu, mem := n.Status.Allocatable[corev1.ResourceCPU], n.Status.Allocatable[corev1.ResourceMemory]; nodeCPU[n.Name] > cpu.MilliValue() || nodeMem[n.Name]<<20 > mem.Value() {
			t.Errorf("node %s hosts %d milli-CPU and %d MiB", n.Name, nodeCPU[n.Name], nodeMem[n.Name])
		}
	}
	if claimedMilli != placedMilli || res.Curve.alloc != placedMilli {
		t.Errorf("the curve counts %d milli-GPU allocated, the placed pods ask %d, their claims hold %d", res.Curve.alloc, placedMilli, claimedMilli)
	}
	if placedMilli == 0 {
		t.Error("no GPU was allocated")
	}
}

func nodeSelectorNames(sel *corev1.NodeSelector) []string {
	var out []string
	if sel == nil {
		return nil
	}
	for _, term := range sel.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn {
				out = append(out, f.Values...)
			}
		}
	}
	return out
}

func TestClaimObject(t *testing.T) {
	c := &Cluster{
		Models: map[string]GPUModel{
			"T4":      {ProductName: "Tesla T4", MemoryMiB: 15360},
			"V100M32": {ProductName: "Tesla V100-SXM2-32GB", MemoryMiB: 32510},
		},
		ModelOrder: []string{"V100M32", "T4"},
	}
	share := func(memMiB int64, selector string) *resourceapi.ExactDeviceRequest {
		r := &resourceapi.ExactDeviceRequest{
			DeviceClassName: sharedGPUClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				"cores": *resource.NewQuantity(46, resource.DecimalSI), "memory": *resource.NewQuantity(memMiB<<20, resource.BinarySI),
			}},
		}
		if selector != "" {
			r.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		return r
	}
	for _, tc := range []struct {
		name string
		pod  TracePod
		want resourceapi.DeviceRequest
	}{{
		name: "whole GPUs of any model",
		pod:  TracePod{GPUs: 2, Milli: 1000},
		want: resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: wholeGPUClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}},
	}, {
		name: "whole GPUs of some models",
		pod:  TracePod{GPUs: 1, Milli: 1000, Models: []string{"V100M32", "T4", "A10"}},
		want: resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: wholeGPUClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["nvidia.strata.sh"].productName in ["Tesla V100-SXM2-32GB", "Tesla T4"]`}}},
		}},
	}, {
		name: "a share of any model, with the smallest model's memory",
		pod:  TracePod{GPUs: 1, Milli: 460},
		want: resourceapi.DeviceRequest{Name: "gpu", Exactly: share(7065, "")},
	}, {
		name: "a share of one model",
		pod:  TracePod{GPUs: 1, Milli: 460, Models: []string{"V100M32", "V100M32"}},
		want: resourceapi.DeviceRequest{Name: "gpu", Exactly: share(14954, `device.attributes["nvidia.strata.sh"].productName == "Tesla V100-SXM2-32GB"`)},
	}, {
		name: "a share of some models, with the smallest accepted memory",
		pod:  TracePod{GPUs: 1, Milli: 460, Models: []string{"T4", "V100M32"}},
		want: resourceapi.DeviceRequest{Name: "gpu", Exactly: share(7065, `device.attributes["nvidia.strata.sh"].productName in ["Tesla V100-SXM2-32GB", "Tesla T4"]`)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			claim, err := claimObject(3, tc.pod, c)
			if err != nil {
				t.Fatal(err)
			}
			if claim.Name != "claim-3" || len(claim.Spec.Devices.Requests) != 1 {
				t.Fatalf("claim %s with %d requests", claim.Name, len(claim.Spec.Devices.Requests))
			}
			if diff := cmp.Diff(tc.want, claim.Spec.Devices.Requests[0]); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
	if claim, err := claimObject(0, TracePod{CPU: 1000}, c); claim != nil || err != nil {
		t.Errorf("a CPU-only pod has claim %v, error %v", claim, err)
	}
}

func TestLoadProfile(t *testing.T) {
	for _, name := range FrameworkProfiles {
		t.Run(name, func(t *testing.T) {
			prof, err := LoadProfile(name)
			if err != nil {
				t.Fatal(err)
			}
			if !hasPlugin(prof.Plugins.MultiPoint, "DynamicResources") || !hasPlugin(prof.Plugins.MultiPoint, "NodeResourcesFit") {
				t.Errorf("profile %s lacks the default plugins: %v", name, prof.Plugins.MultiPoint.Enabled)
			}
			if got, want := hasPlugin(prof.Plugins.MultiPoint, "StrataFragmentation"), name == ProfileStrata; got != want {
				t.Errorf("profile %s has StrataFragmentation: %v, want %v", name, got, want)
			}
		})
	}
	if _, err := LoadProfile("binpack"); err == nil {
		t.Error("an unknown profile loaded")
	}
}

func hasPlugin(set config.PluginSet, name string) bool {
	for _, p := range set.Enabled {
		if p.Name == name {
			return true
		}
	}
	return false
}

// The strata profile is strata-scheduler's shipped profile without
// StrataGang (and the defaults it displaces) and with
// StrataFragmentation: a change to the shipped profile must be made
// here too.
func TestStrataProfileIsTheShippedOne(t *testing.T) {
	type pluginSet struct {
		Enabled  []map[string]any `json:"enabled,omitempty"`
		Disabled []map[string]any `json:"disabled,omitempty"`
	}
	type profile struct {
		SchedulerName string                `json:"schedulerName"`
		Plugins       map[string]*pluginSet `json:"plugins"`
		PluginConfig  []any                 `json:"pluginConfig"`
		Percentage    *int32                `json:"percentageOfNodesToScore"`
	}
	read := func(raw []byte, name string) profile {
		var cfg struct {
			Profiles []profile `json:"profiles"`
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		for _, p := range cfg.Profiles {
			if p.SchedulerName == name {
				return p
			}
		}
		t.Fatalf("no profile %s", name)
		return profile{}
	}
	without := func(list []map[string]any, name string) []map[string]any {
		var out []map[string]any
		for _, p := range list {
			if p["name"] != name {
				out = append(out, p)
			}
		}
		return out
	}
	shipped := read(deployments.SchedulerConfig(), schedconfig.ProfileName)
	for point, set := range shipped.Plugins {
		set.Enabled = without(set.Enabled, "StrataGang")
		// Disabled only to make room for StrataGang.
		switch point {
		case "queueSort":
			set.Disabled = without(set.Disabled, "*")
		case "placementGenerate":
			set.Disabled = without(set.Disabled, "TopologyPlacementGenerator")
		}
		if len(set.Enabled)+len(set.Disabled) == 0 {
			delete(shipped.Plugins, point)
		}
	}
	raw, err := profileFiles.ReadFile("profiles/strata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ours := read(raw, ProfileStrata)
	if diff := cmp.Diff(shipped.Plugins, ours.Plugins); diff != "" {
		t.Errorf("plugins of profiles/strata.yaml differ from the shipped profile's, StrataGang aside (-shipped +ours):\n%s", diff)
	}
	if diff := cmp.Diff(shipped.Percentage, ours.Percentage); diff != "" {
		t.Errorf("percentageOfNodesToScore of profiles/strata.yaml differs from the shipped profile's (-shipped +ours):\n%s", diff)
	}
	if diff := cmp.Diff(shipped.PluginConfig, ours.PluginConfig); diff != "" {
		t.Errorf("plugin args differ (-shipped +ours):\n%s", diff)
	}
}

// A whole seed of the default variant on the whole cluster, for timing
// (STRATA_REPLAY_FULL=1; run with -cpuprofile to see where time goes;
// STRATA_REPLAY_VARIANT, _PROFILE, _PODS and _EVERY change the pod list
// and the profile, cut the sample and thin the cluster).
func TestFrameworkFullSeed(t *testing.T) {
	if os.Getenv("STRATA_REPLAY_FULL") == "" {
		t.Skip("set STRATA_REPLAY_FULL=1 to replay a whole seed")
	}
	variant := "default"
	if v := os.Getenv("STRATA_REPLAY_VARIANT"); v != "" {
		variant = v
	}
	nodes, pods := readTrace(t, variant)
	// STRATA_REPLAY_EVERY=k keeps every k-th node: the same dynamics on a
	// k times smaller cluster, k² times faster.
	if k, err := strconv.Atoi(os.Getenv("STRATA_REPLAY_EVERY")); err == nil && k > 1 {
		nodes = everyKth(nodes, k)
	}
	c := buildCluster(t, nodes)
	profile := ProfileDefault
	if p := os.Getenv("STRATA_REPLAY_PROFILE"); p != "" {
		profile = p
	}
	prof := loadProfile(t, profile)
	if p, err := strconv.Atoi(os.Getenv("STRATA_REPLAY_PERCENT")); err == nil {
		prof.PercentageOfNodesToScore = ptr.To(int32(p))
	}
	seed := uint64(42)
	if n, err := strconv.Atoi(os.Getenv("STRATA_REPLAY_SEED")); err == nil {
		seed = uint64(n)
	}
	sample := Sample(pods, c.TotalMilli, seed)
	if n, err := strconv.Atoi(os.Getenv("STRATA_REPLAY_PODS")); err == nil && n < len(sample) {
		sample = sample[:n]
	}
	start, cpu0 := time.Now(), cpuTime(t)
	res, s, err := replayFramework(testContext(t), c, sample, prof, seed, runtime.GOMAXPROCS(0))
	if err != nil {
		t.Fatal(err)
	}
	elapsed, cpu := time.Since(start), cpuTime(t)-cpu0
	checkReplay(t, c, sample, res, s)
	t.Logf("%s: %d pods in %s, %.1f pods/s, %.1f ms CPU per pod, %d placed, unallocated at 100 %%: %.2f %%", profile, len(sample), elapsed.Round(time.Millisecond),
		float64(len(sample))/elapsed.Seconds(), float64(cpu.Milliseconds())/float64(len(sample)), len(sample)-res.Failed, res.Curve.At100)
	for _, f := range []float64{0.25, 0.5, 0.75, 1} {
		i := int(f*float64(len(sample))) - 1
		t.Logf("after %d pods: %.1f%% of GPUs arrived", i+1, 100*float64(arrivedMilli(sample[:i+1]))/float64(c.TotalMilli))
	}
}

func arrivedMilli(pods []TracePod) int64 {
	var sum int64
	for _, p := range pods {
		sum += p.GPUMilli()
	}
	return sum
}

// cpuTime is the CPU time the process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// As kube-scheduler, the replay stops searching once it has found the
// profile's share of feasible nodes, and the next pod's search starts
// where the last one stopped, rejected nodes counted.
func TestSearchStopsAtPercentageOfNodesToScore(t *testing.T) {
	var nodes []TraceNode
	for i := range 250 {
		n := TraceNode{Name: fmt.Sprintf("n%03d", i), CPU: 64000, Memory: 262144}
		if i == 5 {
			n.CPU = 500 // too small for any pod
		}
		nodes = append(nodes, n)
	}
	c := buildCluster(t, nodes)
	sample := []TracePod{{Name: "a", CPU: 1000, Memory: 1024}, {Name: "b", CPU: 1000, Memory: 1024}, {Name: "c", CPU: 1000, Memory: 1024}}
	for _, tc := range []struct {
		percentage int32
		feasible   []int
		nextStart  int
	}{
		// Adaptive on 250 nodes: 50 % less 2 % = 120 nodes. The first pod
		// searches n000-n120 (n005 is rejected), the second n121-n240, the
		// third n241-n249 and n000-n111.
		{percentage: 0, feasible: []int{120, 120, 120}, nextStart: 112},
		{percentage: 100, feasible: []int{249, 249, 249}, nextStart: 0},
		// 10 % is 25 nodes, fewer than kube-scheduler's floor of 100.
		{percentage: 10, feasible: []int{100, 100, 100}, nextStart: 52}, // n000-n100, n101-n200, n201-n249 and n000-n051
	} {
		// One worker filters a node at a time, two filter 16 at a time:
		// the search keeps the same nodes either way.
		for _, workers := range []int{1, 2} {
			t.Run(fmt.Sprintf("%d/workers=%d", tc.percentage, workers), func(t *testing.T) {
				prof, err := profileWith(ProfileDefault, ptr.To(tc.percentage))
				if err != nil {
					t.Fatal(err)
				}
				res, s, err := replayFramework(testContext(t), c, sample, prof, 42, workers)
				if err != nil {
					t.Fatal(err)
				}
				if !cmp.Equal(res.Feasible, tc.feasible) {
					t.Errorf("feasible nodes per pod %v, want %v", res.Feasible, tc.feasible)
				}
				if s.nextStart != tc.nextStart {
					t.Errorf("the next search starts at node %d, want %d", s.nextStart, tc.nextStart)
				}
			})
		}
	}
	if _, err := profileWith(ProfileDefault, ptr.To(int32(101))); err == nil {
		t.Error("percentageOfNodesToScore 101 accepted")
	}
}

func TestNodesToFind(t *testing.T) {
	for _, tc := range []struct {
		percentage int32
		nodes      int
		want       int
	}{
		{0, 50, 50},       // fewer than 100: all
		{0, 1213, 497},    // openb: 50 - 9 = 41 %
		{0, 5000, 500},    // 10 %
		{0, 10000, 500},   // at least 5 %
		{100, 1213, 1213}, // every node
		{10, 1213, 121},   // the strata profile on openb
		{30, 200, 100},    // never fewer than 100
	} {
		if got := nodesToFind(tc.percentage, tc.nodes); got != tc.want {
			t.Errorf("nodesToFind(%d, %d) = %d, want %d", tc.percentage, tc.nodes, got, tc.want)
		}
	}
}
