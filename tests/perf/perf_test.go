//go:build perf

// Package perf runs upstream Kubernetes' own scheduler benchmarks
// (test/integration/scheduler_perf, v1.37.2) and Strata's workloads in
// the same format, each test case twice in one invocation: with the plain
// kube-scheduler profile and with Strata's shipped profile. See
// docs/benchmarks.md and `make bench`.
//
// The package builds only with the "perf" tag: its binary links the API
// server and the harness, and `make test` does not run it.
package perf

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	_ "k8s.io/component-base/logs/json/register"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
)

var (
	suites      = flag.String("strata-suites", "upstream/dra", "comma-separated folders under testdata whose performance-config.yaml files to run (each folder and the folders below it)")
	workloads   = flag.String("strata-workloads", "", "regular expression on <test case>/<workload> choosing the workloads to run (all when empty; the harness's label filter applies too)")
	strataFirst = flag.Bool("strata-first", false, "run each test case with Strata's profile before the plain one (make bench alternates the order by round)")
)

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// BenchmarkPerfScheduling runs every test case of the chosen suites as
// <name>_plain and <name>_strata (see writePairedConfig). The harness
// resolves templates against the working directory, so each config runs
// from its own folder.
func BenchmarkPerfScheduling(b *testing.B) {
	home, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	strataConfig, err := writeStrataSchedulerConfig(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	pick, err := regexp.Compile("^(?:" + *workloads + ")$")
	if err != nil {
		b.Fatalf("-strata-workloads: %v", err)
	}
	configs, err := findConfigs(filepath.Join(home, "testdata"), strings.Split(*suites, ","))
	if err != nil {
		b.Fatal(err)
	}
	for _, config := range configs {
		dir := filepath.Dir(config)
		rel, _ := filepath.Rel(filepath.Join(home, "testdata"), dir)
		topic := strings.ReplaceAll(rel, string(filepath.Separator), "_")
		paired := filepath.Join(b.TempDir(), topic+".yaml")
		n, err := writePairedConfig(config, paired, strataConfig, pick, *strataFirst)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			continue
		}
		b.Run(topic, func(b *testing.B) {
			if err := os.Chdir(dir); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = os.Chdir(home) }()
			perf.RunBenchmarkPerfScheduling(b, paired, topic, registry())
		})
	}
}
