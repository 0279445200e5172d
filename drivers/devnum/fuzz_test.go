package devnum

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzCharDeviceMajors: every major read from /proc/devices is one the
// kernel can have (12 bits, not negative), named as the kernel prints
// it, from a line of the character section.
func FuzzCharDeviceMajors(f *testing.F) {
	f.Add([]byte("Character devices:\n  1 mem\n195 nvidia-frontend\n234 nvidia-uvm\n237 nvidia-caps\n236 devdrv-cdev\n" +
		"510 cambricon_dev\n\nBlock devices:\n  8 sd\n259 blkext\n"))
	f.Add([]byte("Character devices:\n  4 /dev/vc/0\n  5 /dev/tty\n235 hisi_davinci_intf\n\nBlock devices:\n  7 loop\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "devices"), in, 0o600); err != nil {
			t.Fatal(err)
		}
		majors, err := CharDeviceMajors(root)
		if err != nil {
			return
		}
		charSection := string(in)
		if i := strings.Index(charSection, "\nBlock devices"); i >= 0 {
			charSection = charSection[:i]
		} else if strings.HasPrefix(charSection, "Block devices") {
			charSection = ""
		}
		for name, n := range majors {
			if n < 0 || n > 4095 {
				t.Errorf("major %d of %q is no device major", n, name)
			}
			if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' }) {
				t.Errorf("major %d has name %q", n, name)
			}
			if !strings.Contains(charSection, name) || !strings.Contains(charSection, strconv.FormatInt(n, 10)) {
				t.Errorf("%q = %d is not in the character section", name, n)
			}
		}
	})
}
