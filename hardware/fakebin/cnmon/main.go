// Command cnmon is a fake of Cambricon's cnmon for nodes without MLUs:
// the real-node tests mount it into the Cambricon plugin's pod where the
// host's cnmon would be. It answers from hardware/cnmonmock (the formats
// and refusals of cnmon's recorded output) and keeps the server's state
// between calls (package faketool). Like the driver and udev, it lists
// each sMLU's capability node in sysfs (/sys/dev/char) and makes the node
// under /dev/cambricon-caps, and removes both with the sMLU.
// "cnmon strata-fake fault -c N Bad", "... lose -c N", "... ignore-switch
// -c N" and "... recover -c N" break and mend card N (package cnmonmock),
// for tests on a real node.
//
// Settings ("cnmon.json" beside it): {"devices": 8, "state": FILE,
// "devRoot": DIR, "devChar": DIR}.
package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/cnmonmock"
	"github.com/strata-sh/strata/hardware/fakebin/internal/faketool"
	"github.com/strata-sh/strata/hardware/persist"
)

func main() {
	faketool.Program{
		New: func(s faketool.Settings) (persist.Runner, error) {
			c, err := cnmonmock.New(s.Devices)
			if err != nil {
				return nil, err
			}
			if s.DevChar != "" {
				c.PublishCapabilityNodes(s.DevChar, hardware.CambriconCapMajor)
			}
			return c, nil
		},
		// sMLU mode is switched with "cnmon set", instances made and
		// removed with "cnmon smlu"; the fake's own "strata-fake
		// fault|lose|ignore-switch|recover -c N" breaks and mends a
		// card, and is kept with the state.
		Mutating: func(args []string) bool {
			return len(args) > 0 && (args[0] == "set" || args[0] == "smlu" || args[0] == cnmonmock.FakeCommand)
		},
		Sync: syncCapabilityNodes,
	}.Main("cnmon")
}

// syncCapabilityNodes does udev's part: a node under /dev for every
// capability the kernel lists in /sys/dev/char, and none for those it no
// longer lists.
func syncCapabilityNodes(s faketool.Settings, _ persist.Runner) error {
	listed := map[string]bool{}
	var nodes []hardware.DeviceNode
	entries, _ := os.ReadDir(s.DevChar)
	for _, e := range entries {
		uevent, err := readUevent(filepath.Join(s.DevChar, e.Name(), "uevent"))
		if err != nil || !strings.HasPrefix(uevent["DEVNAME"], "cambricon-caps/") {
			continue
		}
		major, _ := strconv.Atoi(uevent["MAJOR"])
		minor, _ := strconv.Atoi(uevent["MINOR"])
		nodes = append(nodes, hardware.DeviceNode{Path: uevent["DEVNAME"], Major: uint32(major), Minor: uint32(minor)})
		listed[uevent["DEVNAME"]] = true
	}
	if err := hardware.MakeDeviceNodes(s.DevRoot, nodes); err != nil {
		return err
	}
	existing, _ := filepath.Glob(filepath.Join(s.DevRoot, "dev", "cambricon-caps", "*"))
	for _, p := range existing {
		if !listed["cambricon-caps/"+filepath.Base(p)] {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func readUevent(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out, sc.Err()
}
