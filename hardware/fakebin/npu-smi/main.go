// Command npu-smi is a fake of Huawei's npu-smi for nodes without Ascend
// NPUs: the real-node tests mount it into the Ascend plugin's pod where
// the host's npu-smi would be. It answers from hardware/npusmimock (the
// formats and refusals of npu-smi's recorded output) and keeps the
// server's state between calls (package faketool). Like the driver, it
// makes a vdavinci<id> device node when a vNPU is created and removes it
// when the vNPU is destroyed. "npu-smi strata-fake fault -i N Alarm CODE",
// "... lose -i N" and "... recover -i N" break and mend chip N (package
// npusmimock), for health tests on a real node.
//
// Settings ("npu-smi.json" beside it): {"model": "910B3", "devices": 8,
// "state": FILE, "devRoot": DIR}.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/fakebin/internal/faketool"
	"github.com/strata-sh/strata/hardware/npusmimock"
	"github.com/strata-sh/strata/hardware/persist"
)

func main() {
	faketool.Program{
		New: func(s faketool.Settings) (persist.Runner, error) { return npusmimock.New(s.Model, s.Devices) },
		// vNPUs are created and destroyed with "npu-smi set -t ...";
		// the fake's own "strata-fake fault|lose|recover -i N" breaks
		// and mends a chip, and is kept with the state.
		Mutating: func(args []string) bool {
			return len(args) > 0 && (args[0] == "set" || args[0] == npusmimock.FakeCommand)
		},
		Sync: syncVNPUNodes,
	}.Main("npu-smi")
}

// syncVNPUNodes makes the vdavinci node of every vNPU and removes those
// of vNPUs that are gone.
func syncVNPUNodes(s faketool.Settings, tool persist.Runner) error {
	ids := tool.(*npusmimock.NPUSMI).VNPUs()
	var nodes []hardware.DeviceNode
	for _, id := range ids {
		nodes = append(nodes, hardware.DeviceNode{Path: fmt.Sprintf("vdavinci%d", id), Major: hardware.AscendDavinciMajor, Minor: uint32(id)})
	}
	if err := hardware.MakeDeviceNodes(s.DevRoot, nodes); err != nil {
		return err
	}
	existing, _ := filepath.Glob(filepath.Join(s.DevRoot, "dev", "vdavinci*"))
	for _, p := range existing {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "vdavinci"))
		if err == nil && !slices.Contains(ids, id) {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}
