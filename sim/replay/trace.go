// Package replay replays GPU-sharing traces in the protocol of Weng et
// al. (USENIX ATC'23, "Beware of Fragmentation"): the pod list is inflated
// to 130 % of the cluster's GPUs by drawing with replacement, pods arrive
// one after another in a seeded order and are never deleted, and the
// figure of merit is the share of the cluster's GPUs left unallocated when
// the arrived GPU demand reaches 100 % of the cluster.
//
// This file reads Alibaba's openb trace format (clusterdata,
// cluster-trace-gpu-v2023).
package replay

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// TraceNode is one node of a node list.
type TraceNode struct {
	Name string
	// CPU is in milli-CPU, Memory in MiB.
	CPU, Memory int64
	GPUs        int
	Model       string
}

// TracePod is one pod of a pod list.
type TracePod struct {
	Name string
	// CPU is in milli-CPU, Memory in MiB.
	CPU, Memory int64
	// GPUs whole GPUs, or 1 with Milli < 1000 for a share of one.
	GPUs  int
	Milli int
	// Models are the GPU models the pod accepts (gpu_spec); empty: any.
	Models []string
}

// GPUMilli is the pod's GPU demand in milli-GPU.
func (p TracePod) GPUMilli() int64 {
	if p.GPUs == 0 {
		return 0
	}
	return int64(p.GPUs) * int64(p.Milli)
}

// ReadNodes reads a node list (sn,cpu_milli,memory_mib,gpu,model).
func ReadNodes(path string) ([]TraceNode, error) {
	rows, err := readCSV(path, "sn", "cpu_milli", "memory_mib", "gpu", "model")
	if err != nil {
		return nil, err
	}
	out := make([]TraceNode, 0, len(rows))
	for i, r := range rows {
		n := TraceNode{Name: r["sn"], Model: r["model"]}
		var gpus int64
		if err := parseInts(path, i, r, map[string]*int64{"cpu_milli": &n.CPU, "memory_mib": &n.Memory, "gpu": &gpus}); err != nil {
			return nil, err
		}
		n.GPUs = int(gpus)
		out = append(out, n)
	}
	return out, nil
}

// ReadPods reads a pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli
// and, in most variants, gpu_spec). A pod with several GPUs takes them
// whole whatever its gpu_milli says, as the trace's authors read it.
func ReadPods(path string) ([]TracePod, error) {
	rows, err := readCSV(path, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	out := make([]TracePod, 0, len(rows))
	for i, r := range rows {
		p := TracePod{Name: r["name"]}
		var gpus, milli int64
		if err := parseInts(path, i, r, map[string]*int64{"cpu_milli": &p.CPU, "memory_mib": &p.Memory, "num_gpu": &gpus, "gpu_milli": &milli}); err != nil {
			return nil, err
		}
		p.GPUs, p.Milli = int(gpus), int(milli)
		switch {
		case p.GPUs == 0:
			p.Milli = 0
		case p.GPUs > 1:
			p.Milli = 1000
		case p.Milli <= 0 || p.Milli > 1000:
			return nil, fmt.Errorf("%s row %d: gpu_milli %d is not within 1 to 1000", path, i+2, p.Milli)
		}
		if s := strings.TrimSpace(r["gpu_spec"]); s != "" {
			p.Models = strings.Split(s, "|")
		}
		out = append(out, p)
	}
	return out, nil
}

func readCSV(path string, required ...string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	for _, want := range required {
		found := false
		for _, h := range header {
			found = found || h == want
		}
		if !found {
			return nil, fmt.Errorf("%s: no %q column", path, want)
		}
	}
	var out []map[string]string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		row := make(map[string]string, len(header))
		for i, h := range header {
			row[h] = rec[i]
		}
		out = append(out, row)
	}
}

func parseInts(path string, i int, r map[string]string, into map[string]*int64) error {
	for col, dst := range into {
		v, err := strconv.ParseInt(strings.TrimSpace(r[col]), 10, 64)
		if err != nil {
			return fmt.Errorf("%s row %d: %s %q: %w", path, i+2, col, r[col], err)
		}
		*dst = v
	}
	return nil
}
