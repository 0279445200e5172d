package app

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware/simulated"
)

// TestUnreadableLedgerRefusesToStart: a vNPU ledger that does not decode
// stops the plugin at start-up, through the Ascend backend, with a
// LedgerCorrupt warning on the node naming the file; the file is left as
// it is.
func TestUnreadableLedgerRefusesToStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// Short: the plugin refuses folders too long for its sockets.
	root, err := os.MkdirTemp("", "strata-ascend-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	m, err := simulated.New(filepath.Join(root, "machine"), "huawei-atlas-800t-a2", "node-a", simulated.Ascend, "host-boot")
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.NodeName, o.BootIDPath = "node-a", ""
	o.PluginDataDir, o.RegistrarDir, o.CDIDir = filepath.Join(root, "data"), filepath.Join(root, "reg"), filepath.Join(root, "cdi")
	o.SysfsRoot, o.ProcRoot, o.DevRoot = m.SysfsRoot(), m.ProcRoot(), m.DevRoot()
	o.NPUSMI, o.DriverRoot, o.DCMIDir = m.Path(simulated.AscendNPUSMI), m.Path(simulated.AscendDriverRoot), m.Path(simulated.AscendDCMI)
	if err := os.MkdirAll(o.PluginDataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(o.PluginDataDir, "vnpus.json")
	corrupt := []byte(`[{"claim":"c1","device":"npu-2-vir05-1c-16g-0","card":2,"chip":0,"id":13`)
	if err := os.WriteFile(ledger, corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()

	if _, err := Start(ctx, o, client, Host{NPUSMI: m.NPUSMI}); !errors.Is(err, plugin.ErrCorruptLedger) {
		t.Fatalf("start: %v, want %v", err, plugin.ErrCorruptLedger)
	}
	events, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 || events.Items[0].Reason != "LedgerCorrupt" || events.Items[0].InvolvedObject.Name != "node-a" ||
		!strings.Contains(events.Items[0].Message, ledger) {
		t.Errorf("events %+v, want one LedgerCorrupt on node-a naming %s", events.Items, ledger)
	}
	if got, _ := os.ReadFile(ledger); !bytes.Equal(got, corrupt) {
		t.Errorf("the ledger was changed to %q", got)
	}
}
