package cambricon

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadMajors: /proc/devices, read back from the node. Majors that
// read are ones the kernel can have. (The sMLU ledger, the other file the
// backend reads back, is fuzzed with the plugin's ledger, FuzzLedgerDecode.)
func FuzzReadMajors(f *testing.F) {
	f.Add([]byte("Character devices:\n  1 mem\n226 cambricon_ctl\n227 cambricon_dev\n228 cn_rpmsg\n229 cambricon_smlu_cap\n\nBlock devices:\n  8 sd\n"))
	f.Add([]byte("Character devices:\n226 cambricon_ctl\n227 cambricon_dev\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, procDevices []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "devices"), procDevices, 0o600); err != nil {
			t.Fatal(err)
		}
		if m, err := readMajors(dir); err == nil {
			if m.ctl <= 0 || m.dev <= 0 {
				t.Errorf("majors %+v read without the control and card regions", m)
			}
			for _, n := range []int64{m.ctl, m.dev, m.ipcm, m.smluCap} {
				if n < 0 || n > 4095 {
					t.Errorf("majors %+v: %d is no device major", m, n)
				}
			}
		}
	})
}
