package ascend

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzReadStateFiles: the vNPU ledger and /proc/devices, the two files
// the backend reads back from the node. A ledger that reads is written
// and read back the same; majors that read are ones the kernel can have.
func FuzzReadStateFiles(f *testing.F) {
	ledger, _ := json.Marshal([]vnpu{
		{Claim: "uid-a", Device: "npu-0-vir05-1c-16g-0", Card: 0, Chip: 0, ID: 100},
		{Claim: "uid-b", Device: "npu-1-vir10-3c-32g-0", Card: 1, Chip: 0, ID: 116},
	})
	devices := []byte("Character devices:\n  1 mem\n236 devdrv-cdev\n237 hisi_davinci_intf\n238 devmm_svm\n239 hisi_hdc\n\nBlock devices:\n  8 sd\n")
	f.Add(ledger, devices)
	f.Add([]byte("null"), []byte("Character devices:\n236 devdrv-cdev\n"))
	f.Add([]byte("[]"), []byte(""))
	f.Fuzz(func(t *testing.T, ledgerFile, procDevices []byte) {
		dir := t.TempDir()
		b := &Backend{cfg: Config{StateDir: dir, ProcRoot: dir}}
		if err := os.WriteFile(b.ledgerPath(), ledgerFile, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "devices"), procDevices, 0o600); err != nil {
			t.Fatal(err)
		}
		if entries, err := b.readLedger(); err == nil {
			if err := b.writeLedger(entries); err != nil {
				t.Fatalf("write back a ledger that read: %v", err)
			}
			again, err := b.readLedger()
			if err != nil {
				t.Fatalf("read back a ledger just written: %v", err)
			}
			if diff := cmp.Diff(entries, again, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ledger changed on write and read (-first +second):\n%s", diff)
			}
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
