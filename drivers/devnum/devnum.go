// Package devnum reads Linux device numbers for the backends: the
// character device majors the kernel's drivers registered
// (/proc/devices), and the bounds of a major and a minor. It is
// vendor-neutral and knows nothing of the kubelet plugin.
package devnum

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MaxMajor is the largest device major number (12 bits).
const MaxMajor = 1<<12 - 1

// MaxMinor is the largest device minor number (20 bits).
const MaxMinor = 1<<20 - 1

// CharDeviceMajors reads the character device majors the kernel's drivers
// registered, by name, from <procRoot>/devices. Drivers whose majors are
// dynamic (most accelerator drivers) are only found there.
func CharDeviceMajors(procRoot string) (map[string]int64, error) {
	path := filepath.Join(procRoot, "devices")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read device majors: %w", err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Block devices") {
			break
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || n < 0 || n > MaxMajor {
			// Not a major the kernel can give: a line of something else.
			continue
		}
		out[fields[1]] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}
