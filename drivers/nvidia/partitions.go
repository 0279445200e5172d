package nvidia

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/strata-sh/strata/drivers/pci"
)

// fabricPartitions is the part of the fabric manager's partition list
// ("fmpm -l") that Strata reads.
type fabricPartitions struct {
	PartitionInfo []struct {
		PartitionID int `json:"partitionId"`
		NumGPUs     int `json:"numGpus"`
		GPUInfo     []struct {
			PCIBusID string `json:"pciBusId"`
		} `json:"gpuInfo"`
	} `json:"partitionInfo"`
}

// readPartitions maps each GPU (by kernel bus ID) to the id of the NVLink
// partition of each size it belongs to, with the ids written as the GPU
// indexes they span ("0-3"), so that attribute values are readable and
// identical on every node of the same model. A missing file means the
// node has no NVSwitch fabric.
func readPartitions(path string, indexByBusID map[string]int) (map[string]map[int]string, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read fabric partitions: %w", err)
	}
	var list fabricPartitions
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("parse fabric partitions %s: %w", path, err)
	}
	out := map[string]map[int]string{}
	for _, p := range list.PartitionInfo {
		if p.NumGPUs < 2 || p.NumGPUs != len(p.GPUInfo) {
			continue // single-GPU partitions add nothing to match on
		}
		var indexes []int
		var busIDs []string
		for _, g := range p.GPUInfo {
			bus := pci.Normalize(g.PCIBusID)
			idx, ok := indexByBusID[bus]
			if !ok {
				return nil, fmt.Errorf("fabric partition %d lists GPU %s, which NVML does not report", p.PartitionID, bus)
			}
			indexes = append(indexes, idx)
			busIDs = append(busIDs, bus)
		}
		id := spanName(indexes)
		for _, bus := range busIDs {
			if out[bus] == nil {
				out[bus] = map[int]string{}
			}
			out[bus][p.NumGPUs] = id
		}
	}
	return out, nil
}

// spanName writes GPU indexes as "0-3" when contiguous, else "0_2_5".
func spanName(idx []int) string {
	contiguous := true
	for i := 1; i < len(idx); i++ {
		if idx[i] != idx[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous {
		return fmt.Sprintf("%d-%d", idx[0], idx[len(idx)-1])
	}
	parts := make([]string, len(idx))
	for i, v := range idx {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, "_")
}
