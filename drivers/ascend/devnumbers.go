package ascend

import (
	"fmt"
	"path/filepath"

	"github.com/strata-sh/strata/drivers/plugin"
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

func readMajors(procRoot string) (majors, error) {
	all, err := plugin.CharDeviceMajors(procRoot)
	if err != nil {
		return majors{}, err
	}
	m := majors{davinci: all[procDavinci], manager: all[procManager], svm: all[procSVM], hdc: all[procHDC]}
	if m.davinci == 0 || m.manager == 0 {
		return majors{}, fmt.Errorf("%s lists no %s or %s character device: is the Ascend driver loaded?", filepath.Join(procRoot, "devices"), procDavinci, procManager)
	}
	return m, nil
}
