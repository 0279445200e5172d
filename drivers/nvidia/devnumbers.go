package nvidia

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/strata-sh/strata/drivers/devnum"
)

// devNumbers are the character device numbers the NVIDIA kernel modules
// registered. Only nvidia's major is fixed; nvidia-uvm's and nvidia-caps'
// are dynamic and differ between hosts, and MIG capability minors come
// from the driver's table.
type devNumbers struct {
	nvidia, uvm, caps int64
	// migMinors maps "gpu<minor>/gi<id>/access" and
	// "gpu<minor>/gi<id>/ci<id>/access" to the nvidia-caps minor.
	migMinors map[string]int64
}

func readDevNumbers(procRoot string) (devNumbers, error) {
	all, err := devnum.CharDeviceMajors(procRoot)
	if err != nil {
		return devNumbers{}, err
	}
	d := devNumbers{nvidia: all["nvidia-frontend"], uvm: all["nvidia-uvm"], caps: all["nvidia-caps"]}
	if d.nvidia == 0 {
		d.nvidia = all["nvidia"]
	}
	if d.nvidia == 0 || d.uvm == 0 {
		return devNumbers{}, fmt.Errorf("%s lists no nvidia or nvidia-uvm character device: is the NVIDIA driver loaded?", filepath.Join(procRoot, "devices"))
	}
	d.migMinors, err = readMIGMinors(filepath.Join(procRoot, "driver", "nvidia-caps", "mig-minors"))
	return d, err
}

// migMinorTables are the parsed MIG capability tables by file content,
// never changed once stored. The table depends only on the driver, so a
// process that runs many plugins (strata-sim runs one per simulated
// node) keeps one copy instead of one per node.
var migMinorTables sync.Map

// readMIGMinors parses the driver's MIG capability table. A driver
// without MIG support has none, which is not an error. The map returned
// is shared: read it only.
func readMIGMinors(path string) (map[string]int64, error) {
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read MIG capability minors: %w", err)
	}
	if t, ok := migMinorTables.Load(string(raw)); ok {
		return t.(map[string]int64), nil
	}
	t, _ := migMinorTables.LoadOrStore(string(raw), parseMIGMinors(raw))
	return t.(map[string]int64), nil
}

func parseMIGMinors(raw []byte) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		// A minor past the kernel's range is not one (skipped, as a
		// line of something else is).
		if n, err := strconv.ParseInt(fields[1], 10, 64); err == nil && n >= 0 && n <= devnum.MaxMinor {
			out[fields[0]] = n
		}
	}
	return out
}
