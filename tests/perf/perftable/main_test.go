package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two runs of one workload, plain and Strata, as the harness writes them:
// the table pairs them by workload, takes the median and names the ratio.
func TestTablePairsProfilesByWorkload(t *testing.T) {
	item := func(profile string, throughput, attempt, plugin float64) []dataItem {
		name := "BenchmarkPerfScheduling/upstream_dra/SchedulingWithResourceClaimTemplate_" + profile + "/2000pods_200nodes"
		out := []dataItem{
			{Data: map[string]float64{"Average": throughput, "Perc50": throughput, "Perc90": throughput, "Perc99": throughput}, Unit: "pods/s",
				Labels: map[string]string{"Metric": "SchedulingThroughput", "Name": name}},
			{Data: map[string]float64{"Perc50": attempt, "Perc99": 2 * attempt}, Unit: "ms",
				Labels: map[string]string{"Metric": "scheduler_scheduling_attempt_duration_seconds", "Name": name, "result": "scheduled"}},
		}
		if plugin > 0 {
			out = append(out, dataItem{Data: map[string]float64{"Average": plugin}, Unit: "ms",
				Labels: map[string]string{"Metric": "scheduler_plugin_execution_duration_seconds", "Name": name, "plugin": "StrataDeviceFit", "extension_point": "PreFilter"}})
		}
		return out
	}
	runs := [][]dataItem{
		append(item("plain", 40, 10, 0), item("strata", 38, 11, 0.2)...),
		append(item("plain", 44, 10, 0), item("strata", 42, 11, 0.4)...),
		append(item("plain", 36, 10, 0), item("strata", 40, 11, 0.3)...),
	}
	// A strata-only workload, in two of the runs.
	for i := range 2 {
		name := "BenchmarkPerfScheduling/strata/StrataDRAGangs_strata/128nodes_48gangs"
		runs[i] = append(runs[i], dataItem{Data: map[string]float64{"Perc50": 30, "Perc99": 60}, Unit: "ms",
			Labels: map[string]string{"Metric": "scheduler_scheduling_attempt_duration_seconds", "Name": name, "result": "scheduled"}})
	}
	out := tableOf(t, runs)
	lines := strings.Split(out, "\n")
	var row string
	for _, l := range lines {
		if strings.Contains(l, "SchedulingWithResourceClaimTemplate/2000pods_200nodes") && strings.Contains(l, "pods") {
			row = l
			break
		}
	}
	for _, want := range []string{" 3 ", "40.0 ±10%", "40.0 ±5%", "1.00", "10.0/20.0", "11.0/22.0"} {
		if !strings.Contains(row, want) {
			t.Errorf("row %q lacks %q\n%s", row, want, out)
		}
	}
	var own string
	for _, l := range lines {
		if strings.Contains(l, "StrataDRAGangs/128nodes_48gangs") {
			own = l
			break
		}
	}
	for _, want := range []string{" 2 ", "30.0/60.0"} {
		if !strings.Contains(own, want) {
			t.Errorf("strata-only row %q lacks %q\n%s", own, want, out)
		}
	}
	if !strings.Contains(out, "StrataDeviceFit PreFilter") || !strings.Contains(out, "0.3000") {
		t.Errorf("per-plugin table lacks StrataDeviceFit's median PreFilter time:\n%s", out)
	}
}

// The preemption table puts each profile's decisions side by side, with
// the victims the harness scaled to milliseconds scaled back to pods.
func TestPreemptionTable(t *testing.T) {
	var runs [][]dataItem
	for _, victims := range []float64{100, 120, 110} {
		var items []dataItem
		for _, profile := range []string{"plain", "strata"} {
			name := "BenchmarkPerfScheduling/upstream_workload_preemption/GangPreemptionBasic_" + profile + "/100Nodes_1PreemptorGang"
			items = append(items,
				dataItem{Data: map[string]float64{"Perc50": 40, "Perc99": 80}, Unit: "ms",
					Labels: map[string]string{"Metric": "scheduler_preemption_evaluation_duration_seconds", "Name": name, "preemptor": "podgroup"}},
				dataItem{Data: map[string]float64{"Average": victims * 1000}, Unit: "ms",
					Labels: map[string]string{"Metric": "scheduler_workload_preemption_victims", "Name": name}},
				dataItem{Data: map[string]float64{"Average": 5 * 1000}, Unit: "ms",
					Labels: map[string]string{"Metric": "scheduler_preemption_workload_disruptions", "Name": name, "preemptor": "podgroup"}},
			)
		}
		runs = append(runs, items)
	}
	out := tableOf(t, runs)
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "GangPreemptionBasic") && strings.Contains(l, "podgroup") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 2 {
		t.Fatalf("want a podgroup preemption row per profile, got %q\n%s", rows, out)
	}
	for _, row := range rows {
		for _, want := range []string{" 3 ", "40.0/80.0", "110.0 ±9%", "5.0 ±0%"} {
			if !strings.Contains(row, want) {
				t.Errorf("row %q lacks %q\n%s", row, want, out)
			}
		}
	}
}

// tableOf writes each run's data items as the harness writes a result
// file, and returns the tables perftable prints for them.
func tableOf(t *testing.T, runs [][]dataItem) string {
	t.Helper()
	dir := t.TempDir()
	for i, r := range runs {
		raw, err := json.Marshal(map[string]any{"dataItems": r, "version": "v1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "run"+string(rune('a'+i))+".json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	write(&out, r)
	return out.String()
}
