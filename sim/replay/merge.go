package replay

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ReadResults reads back what a replay wrote to a folder (results.csv and
// curves.csv), for Merge.
func ReadResults(dir string) ([]Result, error) {
	results, err := readCSVFile(filepath.Join(dir, "results.csv"), []string{"workload", "policy", "n_seeds", "unalloc_gpu_pct_median", "unalloc_gpu_pct_per_seed", "seconds"})
	if err != nil {
		return nil, err
	}
	var out []Result
	index := map[[2]string]int{}
	for i, row := range results {
		r := Result{Variant: row[0], Policy: row[1], Curve: make([]float64, 131)}
		for b := range r.Curve {
			r.Curve[b] = math.NaN()
		}
		for _, f := range strings.Fields(row[4]) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: row %d: unalloc_gpu_pct_per_seed: %w", dir, i+2, err)
			}
			r.At100 = append(r.At100, v)
		}
		secs, err := strconv.ParseFloat(row[5], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: row %d: seconds: %w", dir, i+2, err)
		}
		r.Elapsed = time.Duration(secs * float64(time.Second))
		index[[2]string{r.Variant, r.Policy}] = len(out)
		out = append(out, r)
	}
	curves, err := readCSVFile(filepath.Join(dir, "curves.csv"), []string{"workload", "policy", "arrived_pct", "unalloc_gpu_pct_median"})
	if err != nil {
		return nil, err
	}
	for i, row := range curves {
		at, ok := index[[2]string{row[0], row[1]}]
		if !ok {
			return nil, fmt.Errorf("%s: curves.csv row %d: %s %s is not in results.csv", dir, i+2, row[0], row[1])
		}
		b, err1 := strconv.Atoi(row[2])
		v, err2 := strconv.ParseFloat(row[3], 64)
		if err1 != nil || err2 != nil || b < 0 || b > 130 {
			return nil, fmt.Errorf("%s: curves.csv row %d: bad point %v", dir, i+2, row)
		}
		out[at].Curve[b] = v
	}
	return out, nil
}

// Merge gathers the results of several replays (folders written by Run)
// into one folder: results.csv, curves.csv and the plots, with every
// policy of a variant on one plot. A variant and policy found twice is an
// error.
func Merge(dirs []string, outDir string) ([]Result, error) {
	var all []Result
	seen := map[[2]string]string{}
	for _, d := range dirs {
		rs, err := ReadResults(d)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			k := [2]string{r.Variant, r.Policy}
			if prev, ok := seen[k]; ok {
				return nil, fmt.Errorf("%s %s is in both %s and %s", r.Variant, r.Policy, prev, d)
			}
			seen[k] = d
		}
		all = append(all, rs...)
	}
	return all, writeResults(outDir, all)
}

func readCSVFile(path string, header []string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != strings.Join(header, ",") {
		return nil, fmt.Errorf("%s: header is not %s", path, strings.Join(header, ","))
	}
	return rows[1:], nil
}
