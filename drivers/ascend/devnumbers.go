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
// read from /proc/devices; minors follow the device numbers (davinciN is
// minor N, vdavinciN minor N of the vNPU major).
type majors struct {
	davinci, vdavinci, manager, svm, hdc int64
}

// Names under which the Ascend driver's character devices appear in
// /proc/devices.
const (
	procDavinci  = "devdrv-cdev"
	procVDavinci = "vdevdrv-cdev"
	procManager  = "davinci_manager"
	procSVM      = "devmm_svm"
	procHDC      = "hisi_hdc"
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
		case procVDavinci:
			m.vdavinci = n
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
