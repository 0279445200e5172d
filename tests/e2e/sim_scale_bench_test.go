package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/cluster"
)

// scaleCluster is a cluster of DGX H100 nodes on a three-tier network:
// scalable units of 32 nodes under one leaf (block), 4 units under a
// spine, as DGX SuperPOD reference designs lay them out.
const scaleCluster = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
name: superpod
nodeGroups:
- name: dgx
  count: %d
  cpu: "224"
  memory: 2Ti
  hardware: nvidia-dgx-h100
  labels:
    network.topology.nvidia.com/spine: spine-{index/128}
    network.topology.nvidia.com/block: block-{index/32}
`

// BenchmarkSimScale boots a strata-sim cluster of STRATA_BENCH_NODES
// (default 100) DGX H100 nodes, every node with its real NVIDIA kubelet
// plugin on fake hardware publishing over the DRA API, then applies
// indexed Jobs whose pods form gangs (PodGroups with a PreferGather
// block rule) that ask for 80% of the cluster's GPUs, and waits until
// the cluster settles. It reports:
//   - boot-s: sim.Start, which returns once every node has published its
//     devices (the cluster is usable);
//   - settle-s: from the apply until every pod rests (less the quiet
//     period that proves it);
//   - peak-rss-MB: the process's peak resident memory (everything runs in
//     it: etcd, API server, scheduler, controllers, nodes, plugins);
//   - heap-MB: live Go heap after settling.
//
// Run one size per process (make bench-sim) so that peak memory is that
// size's.
func BenchmarkSimScale(b *testing.B) {
	nodes := 100
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_NODES")); err == nil {
		nodes = v
	}
	for i := 0; i < b.N; i++ {
		runSimScale(b, nodes)
	}
}

func runSimScale(b *testing.B, nodes int) {
	// As strata-sim runs.
	sim.TuneGC()
	ctx := context.Background()
	c, err := cluster.Parse(fmt.Appendf(nil, scaleCluster, nodes))
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "strata-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)

	stopProfile := cpuProfile(b, "boot")
	start := time.Now()
	s, err := sim.Start(ctx, sim.Config{Cluster: c, Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	boot := time.Since(start)
	stopProfile()
	bootRSS := peakRSS(b)
	writeHeapProfile(b, "boot")
	b.Logf("%d nodes usable after %s (peak RSS %d MB, %d goroutines)", nodes, boot.Round(time.Millisecond), bootRSS>>20, runtime.NumGoroutine())

	body, pods, gangs := gangWorkload(nodes, 0.8)
	objs, err := apply.Decode([]byte(body), "workload.yaml")
	if err != nil {
		b.Fatal(err)
	}
	const quiet = time.Second
	stopProfile = cpuProfile(b, "settle")
	start = time.Now()
	if err := s.Apply(ctx, objs); err != nil {
		b.Fatal(err)
	}
	settled, err := s.WaitSettled(ctx, quiet, 30*time.Minute)
	if err != nil || !settled {
		b.Fatalf("settled %v: %v", settled, err)
	}
	settle := time.Since(start) - quiet
	stopProfile()
	list, err := s.ControlPlane.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	running := 0
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if running != pods {
		b.Errorf("%d of %d gang pods running after settling", running, pods)
	}
	writeHeapProfile(b, "settled")
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.Logf("%d gangs, %d pods settled after %s", gangs, pods, settle.Round(time.Millisecond))
	b.ReportMetric(boot.Seconds(), "boot-s")
	b.ReportMetric(float64(bootRSS>>20), "boot-rss-MB")
	b.ReportMetric(settle.Seconds(), "settle-s")
	b.ReportMetric(float64(peakRSS(b)>>20), "peak-rss-MB")
	b.ReportMetric(float64(ms.HeapInuse>>20), "heap-MB")
	b.ReportMetric(float64(pods), "pods")
	start = time.Now()
	s.Stop()
	stopped = true
	b.ReportMetric(time.Since(start).Seconds(), "stop-s")
}

// gangShapes are the jobs of the workload, cycled: pods per gang and
// GPUs per pod, from whole-node data-parallel jobs to small fine-tuning
// runs.
var gangShapes = []struct{ pods, gpus int }{{16, 8}, {8, 8}, {4, 8}, {8, 4}, {2, 8}, {4, 2}, {32, 8}, {2, 4}}

// gangWorkload returns indexed Jobs whose pods are gangs, with their
// PodGroups and claim templates, asking for fill of the GPUs of nodes
// DGX H100 nodes.
func gangWorkload(nodes int, fill float64) (body string, pods, gangs int) {
	var sb strings.Builder
	for _, g := range []int{2, 4, 8} {
		fmt.Fprintf(&sb, `---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpus-%d}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: nvidia-gpu.strata.sh, count: %d}
`, g, g)
	}
	budget := int(float64(nodes*8) * fill)
	smallest := budget + 1
	for _, s := range gangShapes {
		smallest = min(smallest, s.pods*s.gpus)
	}
	for i := 0; budget >= smallest; i++ {
		shape := gangShapes[i%len(gangShapes)]
		if shape.pods*shape.gpus > budget {
			continue
		}
		budget -= shape.pods * shape.gpus
		name := fmt.Sprintf("job-%d", i)
		fmt.Fprintf(&sb, `---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: %[1]s
  annotations:
    scheduling.strata.sh/network-topology-spec: '{"gatherStrategy": [{"layer": "BlockLayer", "strategy": "PreferGather"}]}'
spec: {minMember: %[2]d}
---
apiVersion: batch/v1
kind: Job
metadata: {name: %[1]s}
spec:
  completionMode: Indexed
  completions: %[2]d
  parallelism: %[2]d
  template:
    metadata:
      labels: {pod-group.scheduling.sigs.k8s.io: %[1]s}
    spec:
      schedulerName: strata-scheduler
      restartPolicy: Never
      resourceClaims: [{name: gpus, resourceClaimTemplateName: gpus-%[3]d}]
      containers:
      - name: worker
        image: nvcr.io/nvidia/pytorch:24.05-py3
        resources: {claims: [{name: gpus}], requests: {cpu: "16", memory: 64Gi}}
`, name, shape.pods, shape.gpus)
		pods += shape.pods
		gangs++
	}
	fmt.Fprintf(&sb, `---
apiVersion: topology.strata.sh/v1alpha1
kind: ClusterNetworkTopology
metadata: {name: default}
spec:
  networkTopologySpec:
  - {topologyLayer: SpineLayer, labelKey: [network.topology.nvidia.com/spine]}
  - {topologyLayer: BlockLayer, parentTopologyLayer: SpineLayer, labelKey: [network.topology.nvidia.com/block]}
  - {topologyLayer: NodeTopologyLayer, parentTopologyLayer: BlockLayer}
`)
	return sb.String(), pods, gangs
}

// cpuProfile profiles the CPU to $STRATA_BENCH_CPU-<stage>.prof when
// STRATA_BENCH_CPU is set, until the function returned is called.
func cpuProfile(b *testing.B, stage string) func() {
	prefix := os.Getenv("STRATA_BENCH_CPU")
	if prefix == "" {
		return func() {}
	}
	f, err := os.Create(prefix + "-" + stage + ".prof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// writeHeapProfile writes heap and goroutine profiles to
// $STRATA_BENCH_HEAP-<stage>[-goroutines].prof when STRATA_BENCH_HEAP is
// set, to see where memory goes at a stage.
func writeHeapProfile(b *testing.B, stage string) {
	prefix := os.Getenv("STRATA_BENCH_HEAP")
	if prefix == "" {
		return
	}
	f, err := os.Create(prefix + "-" + stage + ".prof")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
	g, err := os.Create(prefix + "-" + stage + "-goroutines.prof")
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	if err := pprof.Lookup("goroutine").WriteTo(g, 0); err != nil {
		b.Fatal(err)
	}
}

// peakRSS returns the process's peak resident set size in bytes.
func peakRSS(b *testing.B) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
