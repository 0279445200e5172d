package ascend

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	path := filepath.Join(procRoot, "devices")
	f, err := os.Open(path)
	if err != nil {
		return majors{}, fmt.Errorf("read device majors: %w", err)
	}
	defer f.Close()
	var m majors
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch fields[1] {
		case procDavinci:
			m.davinci = n
		case procManager:
			m.manager = n
		case procSVM:
			m.svm = n
		case procHDC:
			m.hdc = n
		}
	}
	if err := sc.Err(); err != nil {
		return majors{}, err
	}
	if m.davinci == 0 || m.manager == 0 {
		return majors{}, fmt.Errorf("%s lists no %s or %s character device: is the Ascend driver loaded?", path, procDavinci, procManager)
	}
	return m, nil
}
