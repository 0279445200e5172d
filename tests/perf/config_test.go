//go:build perf

package perf

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	schedframework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/deployments"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/scheduler-plugins/devicefit"
	"github.com/strata-sh/strata/scheduler-plugins/fitplus"
	"github.com/strata-sh/strata/scheduler-plugins/fragscore"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
	"github.com/strata-sh/strata/scheduler-plugins/scarceavoid"
)

// configFileName is the harness's file name for a folder's test cases.
const configFileName = "performance-config.yaml"

// Suffixes of the two runs of each test case.
const (
	plainSuffix  = "_plain"
	strataSuffix = "_strata"
)

// strataPlugins are the plugins whose time the harness reports besides
// the in-tree ones.
var strataPlugins = []string{gang.Name, devicefit.Name, fitplus.Name, scarceavoid.Name, fragscore.Name}

// findConfigs lists the performance-config.yaml files in each suite
// folder (relative to root) and below it.
func findConfigs(root string, suites []string) ([]string, error) {
	var out []string
	for _, s := range suites {
		dir := filepath.Join(root, s)
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("suite %q: %w", s, err)
		}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == configFileName {
				out = append(out, path)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s under %v", configFileName, suites)
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// writeStrataSchedulerConfig writes the shipped KubeSchedulerConfiguration
// with its Strata profile alone, named default-scheduler (the benchmarks'
// pods name no scheduler), and without leader election.
func writeStrataSchedulerConfig(dir string) (string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(deployments.SchedulerConfig(), &cfg); err != nil {
		return "", fmt.Errorf("shipped scheduler config: %w", err)
	}
	var strata map[string]any
	profiles, _ := cfg["profiles"].([]any)
	for _, p := range profiles {
		if m, ok := p.(map[string]any); ok && m["schedulerName"] == config.ProfileName {
			strata = m
		}
	}
	if strata == nil {
		return "", fmt.Errorf("shipped scheduler config has no profile %q", config.ProfileName)
	}
	strata["schedulerName"] = "default-scheduler"
	cfg["profiles"] = []any{strata}
	delete(cfg, "leaderElection")
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "strata-scheduler-config.yaml")
	return path, os.WriteFile(path, raw, 0o644)
}

// writePairedConfig writes each test case of an upstream config twice:
// <name>_plain as upstream wrote it, and <name>_strata with Strata's
// scheduler configuration. Workloads and templates are not touched; only
// the workloads whose <test case>/<workload> pick matches are kept. A
// test case that brings its own scheduler configuration (a scoring
// setup) runs plain only, one labelled strata-only Strata only. Both
// collect the harness's default metrics, with Strata's plugins added to
// the per-plugin ones. The plain run comes first, or the Strata run with
// strataFirst (make bench alternates the order from round to round, so
// that drift over a long run does not favour either). It returns how
// many workloads the file holds.
func writePairedConfig(src, dst, strataConfig string, pick *regexp.Regexp, strataFirst bool) (int, error) {
	raw, err := os.ReadFile(src)
	if err != nil {
		return 0, err
	}
	var cases []map[string]any
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		return 0, fmt.Errorf("%s: %w", src, err)
	}
	var out []map[string]any
	count := 0
	for _, tc := range cases {
		var kept []any
		ws, _ := tc["workloads"].([]any)
		for _, w := range ws {
			if m, ok := w.(map[string]any); ok && pick.MatchString(fmt.Sprint(tc["name"])+"/"+fmt.Sprint(m["name"])) {
				kept = append(kept, w)
			}
		}
		if len(kept) == 0 {
			continue
		}
		tc["workloads"] = kept
		if _, ok := tc["metricsCollectorConfig"]; !ok {
			tc["metricsCollectorConfig"] = defaultMetrics()
		}
		var pair []map[string]any
		if !hasLabel(tc, strataOnlyLabel) {
			plain := clone(tc)
			plain["name"] = fmt.Sprint(tc["name"]) + plainSuffix
			pair = append(pair, plain)
		}
		if _, own := tc["schedulerConfigPath"]; !own {
			strata := clone(tc)
			strata["name"] = fmt.Sprint(tc["name"]) + strataSuffix
			strata["schedulerConfigPath"] = strataConfig
			pair = append(pair, strata)
		}
		if strataFirst {
			slices.Reverse(pair)
		}
		out = append(out, pair...)
		count += len(pair) * len(kept)
	}
	if count == 0 {
		return 0, nil
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		return 0, err
	}
	return count, os.WriteFile(dst, b, 0o644)
}

// strataOnlyLabel marks Strata's test cases that use its CRDs, which
// the plain profile's cluster does not have: they run with Strata's
// profile only.
const strataOnlyLabel = "strata-only"

func hasLabel(tc map[string]any, label string) bool {
	labels, _ := tc["labels"].([]any)
	return slices.Contains(labels, any(label))
}

// clone deep-copies a decoded YAML value through YAML.
func clone(m map[string]any) map[string]any {
	b, err := yaml.Marshal(m)
	if err != nil {
		panic(err) // it was decoded from YAML
	}
	var out map[string]any
	if err := yaml.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// defaultMetrics is the harness's default metrics collection (which a
// test case cannot extend) with Strata's plugins among the plugins.
func defaultMetrics() map[string]any {
	type lv = map[string]any
	plugins := append(slices.Clone(perf.PluginNames), strataPlugins...)
	events := schedframework.AllClusterEventLabels()
	results := []string{metrics.ScheduledResult, metrics.UnschedulableResult, metrics.ErrorResult}
	return map[string]any{"metrics": map[string]any{
		"scheduler_framework_extension_point_duration_seconds": []lv{{"label": "extension_point", "values": metrics.ExtensionPoints}},
		"scheduler_scheduling_attempt_duration_seconds":        []lv{{"label": "result", "values": results}},
		"scheduler_pod_scheduling_duration_seconds":            nil,
		"scheduler_plugin_execution_duration_seconds": []lv{
			{"label": "plugin", "values": plugins},
			{"label": "extension_point", "values": metrics.ExtensionPoints},
		},
		"scheduler_queueing_hint_execution_duration_seconds": []lv{
			{"label": "plugin", "values": plugins},
			{"label": "event", "values": events},
		},
		"scheduler_event_handling_duration_seconds": []lv{{"label": "event", "values": events}},
		"scheduler_podgroup_scheduling_attempt_duration_seconds": []lv{
			{"label": "result", "values": []string{metrics.WaitingOnPreemptionResult, metrics.ScheduledResult, metrics.UnschedulableResult, metrics.ErrorResult}},
		},
		"scheduler_podgroup_scheduling_algorithm_duration_seconds": nil,
		// Preemption: how long deciding took and what it evicted, pod by
		// pod (DefaultPreemption) and for whole pod groups (in-tree
		// workload preemption, or StrataGang's job-level preemption, which
		// records the same metrics).
		"scheduler_preemption_evaluation_duration_seconds": []lv{{"label": "preemptor", "values": []string{"pod", "podgroup"}}},
		"scheduler_preemption_victims":                     nil,
		"scheduler_workload_preemption_victims":            nil,
		"scheduler_preemption_workload_disruptions":        []lv{{"label": "preemptor", "values": []string{"podgroup"}}},
	}}
}

// TestUpstreamFilesUnchanged: every file under testdata/upstream is the
// module's copy, byte for byte.
func TestUpstreamFilesUnchanged(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Skipf("module k8s.io/kubernetes not found: %v", err)
	}
	upstream := filepath.Join(strings.TrimSpace(string(out)), "test", "integration", "scheduler_perf")
	n := 0
	err = filepath.WalkDir("testdata/upstream", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, _ := filepath.Rel("testdata/upstream", path)
		ours, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		theirs, err := os.ReadFile(filepath.Join(upstream, rel))
		if err != nil {
			return fmt.Errorf("%s has no upstream copy: %w", rel, err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Errorf("%s differs from upstream's", rel)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 40 {
		t.Errorf("only %d upstream files compared", n)
	}
}

// A test case is written as <name>_plain and <name>_strata; one labelled
// strata-only as <name>_strata alone; only picked workloads are kept.
func TestWritePairedConfig(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "in.yaml")
	in := `- name: Both
  workloadTemplate: []
  workloads:
  - name: small
  - name: big
- name: Own
  labels: [strata-only]
  workloadTemplate: []
  workloads:
  - name: small
`
	if err := os.WriteFile(src, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	for strataFirst, want := range map[bool][]string{
		false: {"Both_plain", "Both_strata", "Own_strata"},
		true:  {"Both_strata", "Both_plain", "Own_strata"},
	} {
		dst := filepath.Join(dir, "out.yaml")
		n, err := writePairedConfig(src, dst, "strata.yaml", regexp.MustCompile("^(?:.*/small)$"), strataFirst)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		var cases []map[string]any
		if err := yaml.Unmarshal(raw, &cases); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tc := range cases {
			names = append(names, fmt.Sprint(tc["name"]))
			if ws := tc["workloads"].([]any); len(ws) != 1 {
				t.Errorf("%s: %d workloads, want the small one", tc["name"], len(ws))
			}
		}
		if n != 3 || !slices.Equal(names, want) {
			t.Errorf("strataFirst %v: wrote %d workloads in %v, want 3 in %v", strataFirst, n, names, want)
		}
	}
}
