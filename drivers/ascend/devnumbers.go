package ascend

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/strata-sh/strata/drivers/devnum"
)

// majors are the character device majors the Ascend driver registered,
// read from /proc/devices (all are dynamic). davinciN and vdavinciN share
// one region, whose minor is the driver's device id: the chip's id for
// davinciN, the vNPU id (from 100) for vdavinciN.
type majors struct {
	davinci, manager, svm, hdc int64
}

// Names under which the Ascend driver's character devices appear in
// /proc/devices, as its open-source kernel modules register them.
const (
	procDavinci = "devdrv-cdev"
	procManager = "hisi_davinci_intf"
	procSVM     = "devmm_svm"
	procHDC     = "hisi_hdc"
)

// readMajors reads every major a container's nodes need. All four are
// required: a region the driver did not register would otherwise become
// a node numbered 0:N in the CDI spec, which the runtime makes and which
// opens nothing (or, on a host whose major 0 is taken, something else).
func readMajors(procRoot string) (majors, error) {
	all, err := devnum.CharDeviceMajors(procRoot)
	if err != nil {
		return majors{}, err
	}
	m := majors{davinci: all[procDavinci], manager: all[procManager], svm: all[procSVM], hdc: all[procHDC]}
	var missing []string
	for _, r := range []struct {
		name  string
		major int64
	}{{procDavinci, m.davinci}, {procManager, m.manager}, {procSVM, m.svm}, {procHDC, m.hdc}} {
		if r.major <= 0 {
			missing = append(missing, r.name)
		}
	}
	if len(missing) > 0 {
		return majors{}, fmt.Errorf("%s lists no %s character device: is the Ascend driver loaded? (NPU containers need /dev/davinciN, /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc)",
			filepath.Join(procRoot, "devices"), strings.Join(missing, ", "))
	}
	return m, nil
}
