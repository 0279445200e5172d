// Command perftable summarizes the JSON files that upstream's scheduler
// benchmark harness writes (-data-items-dir) for `make bench`: per
// workload, the plain and Strata runs side by side, each figure the
// median of the runs with their spread, and the time of Strata's plugins.
//
//	perftable DIR
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// dataItem is one measurement of the harness's output.
type dataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

// runs holds, per workload and profile, each run's values of a figure.
type runs map[string]map[string]map[string][]float64 // workload → profile → figure → values

// strataPlugins are reported in the per-plugin table.
var strataPlugins = []string{"StrataGang", "StrataDeviceFit", "NodeResourcesFitPlus", "ScarceResourceAvoidance", "StrataFragmentation"}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: perftable DIR")
		os.Exit(2)
	}
	r, err := read(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "perftable:", err)
		os.Exit(1)
	}
	write(os.Stdout, r)
}

// read gathers every JSON file of dir.
func read(dir string) (runs, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no harness output (*.json) in %s", dir)
	}
	out := runs{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var doc struct {
			DataItems []dataItem `json:"dataItems"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, it := range doc.DataItems {
			workload, profile, ok := split(it.Labels["Name"])
			if !ok {
				continue
			}
			for figure, v := range figures(it) {
				if out[workload] == nil {
					out[workload] = map[string]map[string][]float64{}
				}
				if out[workload][profile] == nil {
					out[workload][profile] = map[string][]float64{}
				}
				out[workload][profile][figure] = append(out[workload][profile][figure], v)
			}
		}
	}
	return out, nil
}

// split turns "BenchmarkPerfScheduling/<topic>/<case>_<profile>/<workload>/..."
// into "<case>/<workload>" and the profile.
func split(name string) (string, string, bool) {
	parts := strings.Split(name, "/")
	if len(parts) < 4 {
		return "", "", false
	}
	tc := parts[2]
	for _, p := range []string{"plain", "strata"} {
		if base, ok := strings.CutSuffix(tc, "_"+p); ok {
			return base + "/" + parts[3], p, true
		}
	}
	return "", "", false
}

// figures picks the figures of the table from one data item.
func figures(it dataItem) map[string]float64 {
	out := map[string]float64{}
	switch it.Labels["Metric"] {
	case "SchedulingThroughput":
		out["pods/s avg"] = it.Data["Average"]
		out["pods/s p50"] = it.Data["Perc50"]
		out["pods/s p90"] = it.Data["Perc90"]
		out["pods/s p99"] = it.Data["Perc99"]
	case "scheduler_scheduling_attempt_duration_seconds":
		if it.Labels["result"] == "scheduled" {
			out["attempt ms p50"] = it.Data["Perc50"]
			out["attempt ms p99"] = it.Data["Perc99"]
		}
	case "scheduler_preemption_evaluation_duration_seconds":
		out["preempt "+it.Labels["preemptor"]+" decision ms p50"] = it.Data["Perc50"]
		out["preempt "+it.Labels["preemptor"]+" decision ms p99"] = it.Data["Perc99"]
	case "scheduler_preemption_victims":
		// The harness scales every histogram to milliseconds.
		out["preempt pod victims avg"] = it.Data["Average"] / 1000
	case "scheduler_workload_preemption_victims":
		out["preempt podgroup victims avg"] = it.Data["Average"] / 1000
	case "scheduler_preemption_workload_disruptions":
		out["preempt podgroup jobs avg"] = it.Data["Average"] / 1000
	case "scheduler_plugin_execution_duration_seconds":
		if slices.Contains(strataPlugins, it.Labels["plugin"]) {
			out["plugin "+it.Labels["plugin"]+" "+it.Labels["extension_point"]+" ms avg"] = it.Data["Average"]
		}
	}
	return out
}

// median returns the median of vs and their spread as a percentage of
// it: (max-min)/2/median.
func median(vs []float64) (float64, float64) {
	if len(vs) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(vs))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if m == 0 {
		return 0, 0
	}
	return m, 100 * (s[len(s)-1] - s[0]) / 2 / m
}

func write(w io.Writer, r runs) {
	workloads := make([]string, 0, len(r))
	for wl := range r {
		workloads = append(workloads, wl)
	}
	sort.Strings(workloads)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\truns\tplain pods/s\tstrata pods/s\tstrata÷plain\tplain p50/p90/p99\tstrata p50/p90/p99\tplain attempt p50/p99 ms\tstrata attempt p50/p99 ms\t")
	for _, wl := range workloads {
		plain, strata := r[wl]["plain"], r[wl]["strata"]
		// Runs of both profiles; a strata-only workload has no plain runs.
		n := runCount(plain)
		if strata != nil && (plain == nil || runCount(strata) < n) {
			n = runCount(strata)
		}
		pm, ps := median(plain["pods/s avg"])
		sm, ss := median(strata["pods/s avg"])
		ratio := "-"
		if pm > 0 && sm > 0 {
			ratio = fmt.Sprintf("%.2f", sm/pm)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", wl, n,
			withSpread(pm, ps), withSpread(sm, ss), ratio,
			triple(plain, "pods/s p50", "pods/s p90", "pods/s p99"), triple(strata, "pods/s p50", "pods/s p90", "pods/s p99"),
			triple(plain, "attempt ms p50", "attempt ms p99"), triple(strata, "attempt ms p50", "attempt ms p99"))
	}
	tw.Flush()

	writePreemption(w, r, workloads)

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tStrata plugin, extension point\tms per call (median)\t")
	for _, wl := range workloads {
		strata := r[wl]["strata"]
		var keys []string
		for k := range strata {
			if strings.HasPrefix(k, "plugin ") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			m, s := median(strata[k])
			name := strings.TrimSuffix(strings.TrimPrefix(k, "plugin "), " ms avg")
			fmt.Fprintf(tw, "%s\t%s\t%.4f ±%.0f%%\t\n", wl, name, m, s)
		}
	}
	tw.Flush()
}

// runCount is how many runs measured a profile: the harness reports the
// attempt latency of every workload, the throughput of those that ask.
func runCount(f map[string][]float64) int {
	return max(len(f["pods/s avg"]), len(f["attempt ms p50"]))
}

func withSpread(m, s float64) string {
	if m == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ±%.0f%%", m, s)
}

func triple(f map[string][]float64, keys ...string) string {
	var parts []string
	for _, k := range keys {
		m, _ := median(f[k])
		if m == 0 {
			return "-"
		}
		parts = append(parts, fmt.Sprintf("%.1f", m))
	}
	return strings.Join(parts, "/")
}

// writePreemption prints, for the workloads that preempted, each
// profile's decisions side by side: for whole pod groups (in-tree
// workload preemption or StrataGang) and pod by pod (DefaultPreemption),
// the decision time and the victims per decision.
func writePreemption(w io.Writer, r runs, workloads []string) {
	var rows []string
	for _, wl := range workloads {
		for _, profile := range []string{"plain", "strata"} {
			f := r[wl][profile]
			for _, kind := range []string{"podgroup", "pod"} {
				prefix := "preempt " + kind + " "
				if len(f[prefix+"decision ms p50"]) == 0 {
					continue
				}
				jobs := "-"
				if kind == "podgroup" {
					jobs = one(f, prefix+"jobs avg")
				}
				rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s\t", wl, profile, kind, len(f[prefix+"decision ms p50"]),
					triple(f, prefix+"decision ms p50", prefix+"decision ms p99"), one(f, prefix+"victims avg"), jobs))
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tprofile\tpreemptor\truns\tdecision p50/p99 ms\tvictim pods per decision\tvictim jobs per decision\t")
	for _, row := range rows {
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
}

// one is the median of a figure's runs with their spread, or "-".
func one(f map[string][]float64, key string) string {
	if len(f[key]) == 0 {
		return "-"
	}
	m, s := median(f[key])
	return fmt.Sprintf("%.1f ±%.0f%%", m, s)
}
