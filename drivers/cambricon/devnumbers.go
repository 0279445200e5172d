package cambricon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/strata-sh/strata/drivers/cambricon/cnmon"

	"github.com/strata-sh/strata/drivers/devnum"
	"github.com/strata-sh/strata/drivers/plugin"
)

// majors are the character device majors the Cambricon driver allocated,
// read from /proc/devices (every one is dynamic). The minor of
// /dev/cambricon_devN and /dev/cambricon_ipcmN is the card index N.
type majors struct {
	ctl, dev, ipcm int64
	// smluCap is the region of sMLU capability nodes; 0 on drivers
	// without sMLU.
	smluCap int64
}

// Names under which the driver's character regions appear in
// /proc/devices (see package cnmon).
const (
	procCtl  = "cambricon_ctl"
	procDev  = "cambricon_dev"
	procIPCM = "cn_rpmsg"
	procCap  = "cambricon_smlu_cap"
)

func readMajors(procRoot string) (majors, error) {
	all, err := devnum.CharDeviceMajors(procRoot)
	if err != nil {
		return majors{}, err
	}
	m := majors{ctl: all[procCtl], dev: all[procDev], ipcm: all[procIPCM], smluCap: all[procCap]}
	if m.ctl == 0 || m.dev == 0 {
		return majors{}, fmt.Errorf("%s lists no %s or %s character device: is the Cambricon driver loaded?", filepath.Join(procRoot, "devices"), procCtl, procDev)
	}
	return m, nil
}

// capabilityNode returns the numbers of an sMLU's capability node, as
// the kernel lists it under /sys/dev/char: the entry of the sMLU
// capability region whose uevent names the node.
func (b *Backend) capabilityNode(card, id int) (*cdispec.DeviceNode, error) {
	path := cnmon.SMLUDevicePath(card, id)
	if b.major.smluCap == 0 {
		return nil, fmt.Errorf("%s lists no %s character device: the driver has no sMLU (it needs 5.10.27 or later)", filepath.Join(b.cfg.ProcRoot, "devices"), procCap)
	}
	entries, err := filepath.Glob(filepath.Join(b.cfg.DevCharDir, fmt.Sprintf("%d:*", b.major.smluCap)))
	if err != nil {
		return nil, err
	}
	want := "DEVNAME=" + strings.TrimPrefix(path, "/dev/")
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(e, "uevent"))
		if err != nil {
			continue // removed in between
		}
		if !slices.Contains(strings.Split(string(raw), "\n"), want) {
			continue
		}
		_, minor, ok := strings.Cut(filepath.Base(e), ":")
		n, err := strconv.ParseInt(minor, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: not a major:minor entry", e)
		}
		return plugin.CharDeviceNode(b.cfg.DevRoot, path, b.major.smluCap, n), nil
	}
	return nil, fmt.Errorf("the kernel lists no %s under %s", path, b.cfg.DevCharDir)
}
