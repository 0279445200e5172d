package ascend

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadMajors: /proc/devices, read back from the node. Majors that
// read are ones the kernel can have. (The vNPU ledger, the other file the
// backend reads back, is fuzzed with the plugin's ledger, FuzzLedgerDecode.)
func FuzzReadMajors(f *testing.F) {
	f.Add([]byte("Character devices:\n  1 mem\n236 devdrv-cdev\n237 hisi_davinci_intf\n238 devmm_svm\n239 hisi_hdc\n\nBlock devices:\n  8 sd\n"))
	f.Add([]byte("Character devices:\n236 devdrv-cdev\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, procDevices []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "devices"), procDevices, 0o600); err != nil {
			t.Fatal(err)
		}
		if m, err := readMajors(dir); err == nil {
			if m.davinci <= 0 || m.manager <= 0 || m.svm <= 0 || m.hdc <= 0 {
				t.Errorf("majors %+v read without every region a container needs", m)
			}
			for _, n := range []int64{m.davinci, m.manager, m.svm, m.hdc} {
				if n < 0 || n > 4095 {
					t.Errorf("majors %+v: %d is no device major", m, n)
				}
			}
		}
	})
}
