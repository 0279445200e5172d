package cambricon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// FuzzReadStateFiles: the sMLU ledger and /proc/devices, the two files
// the backend reads back from the node. A ledger that reads is written
// and read back the same; majors that read are ones the kernel can have.
func FuzzReadStateFiles(f *testing.F) {
	l, _ := json.Marshal(&ledger{
		Instances: []instance{
			{Claim: "uid-a", Device: "mlu-0", Card: 0, ID: 1, VCore: 25, MemoryMB: 5843},
			{Claim: "uid-b", Device: "mlu-0", ShareID: ptr.To(types.UID("share-1")), Card: 0, ID: 2, VCore: 50, MemoryMB: 8192},
		},
		SMLUOn: []int{0},
	})
	devices := []byte("Character devices:\n  1 mem\n226 cambricon_ctl\n227 cambricon_dev\n228 cn_rpmsg\n229 cambricon_smlu_cap\n\nBlock devices:\n  8 sd\n")
	f.Add(l, devices)
	f.Add([]byte("{}"), []byte("Character devices:\n226 cambricon_ctl\n227 cambricon_dev\n"))
	f.Add([]byte("null"), []byte(""))
	f.Fuzz(func(t *testing.T, ledgerFile, procDevices []byte) {
		dir := t.TempDir()
		b := &Backend{cfg: Config{StateDir: dir, ProcRoot: dir}}
		if err := os.WriteFile(b.ledgerPath(), ledgerFile, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "devices"), procDevices, 0o600); err != nil {
			t.Fatal(err)
		}
		if l, err := b.readLedger(); err == nil {
			if err := b.writeLedger(l); err != nil {
				t.Fatalf("write back a ledger that read: %v", err)
			}
			again, err := b.readLedger()
			if err != nil {
				t.Fatalf("read back a ledger just written: %v", err)
			}
			if diff := cmp.Diff(l, again, cmp.AllowUnexported(ledger{}, instance{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ledger changed on write and read (-first +second):\n%s", diff)
			}
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
