package hardware

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Limits of the NVIDIA driver's MIG capability table.
const (
	migGPUInstancesPerGPU     = 15
	migComputeInstancesPerGPU = 8
)

// migMinors renders /proc/driver/nvidia-caps/mig-minors: one line per
// capability, "<path> <minor>", as the driver lists them.
func migMinors(gpus int) string {
	var b strings.Builder
	b.WriteString("config 1\nmonitor 2\n")
	minor := 3
	for g := 0; g < gpus; g++ {
		for gi := 0; gi < migGPUInstancesPerGPU; gi++ {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", g, gi, minor)
			minor++
			for ci := 0; ci < migComputeInstancesPerGPU; ci++ {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, minor)
				minor++
			}
		}
	}
	return b.String()
}

// FabricPartitionList is the JSON the fabric manager's partition tool
// prints for "list partitions".
type FabricPartitionList struct {
	PartitionInfo    []FabricPartition `json:"partitionInfo"`
	NumPartitions    int               `json:"numPartitions"`
	MaxNumPartitions int               `json:"maxNumPartitions"`
}

// FabricPartition is one partition of GPUs.
type FabricPartition struct {
	PartitionID int             `json:"partitionId"`
	IsActive    int             `json:"isActive"`
	NumGPUs     int             `json:"numGpus"`
	GPUInfo     []FabricGPUInfo `json:"gpuInfo"`
}

// FabricGPUInfo is one GPU of a partition.
type FabricGPUInfo struct {
	PhysicalID      int    `json:"physicalId"`
	UUID            string `json:"uuid"`
	PCIBusID        string `json:"pciBusId"`
	NumEnabledLinks int    `json:"numEnabledLinks"`
	MaxNumLinks     int    `json:"maxNumLinks"`
}

func writeFabricPartitions(path string, m Machine) error {
	gpus := m.GPUs()
	list := FabricPartitionList{NumPartitions: len(m.NVLinkPartitions), MaxNumPartitions: 31}
	for id, members := range m.NVLinkPartitions {
		p := FabricPartition{PartitionID: id, NumGPUs: len(members)}
		for _, idx := range members {
			p.GPUInfo = append(p.GPUInfo, FabricGPUInfo{
				PhysicalID: idx + 1,
				// The fabric manager prints NVML's 8-digit-domain form.
				PCIBusID:        strings.ToUpper("0000" + gpus[idx].BusID()),
				NumEnabledLinks: 18,
				MaxNumLinks:     18,
			})
		}
		list.PartitionInfo = append(list.PartitionInfo, p)
	}
	raw, err := json.MarshalIndent(list, "", "   ")
	if err != nil {
		return err
	}
	return writeFile(path, string(raw)+"\n")
}
