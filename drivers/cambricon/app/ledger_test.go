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

// TestUnreadableLedgerRefusesToStart: an sMLU ledger that does not decode
// stops the plugin at start-up, through the Cambricon backend, with a
// LedgerCorrupt warning on the node naming the file; the file is left as
// it is.
func TestUnreadableLedgerRefusesToStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// Short: the plugin refuses folders too long for its sockets.
	root, err := os.MkdirTemp("", "strata-cambricon-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	m, err := simulated.New(filepath.Join(root, "machine"), "cambricon-mlu370-x8", "node-a", simulated.Cambricon, "host-boot")
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.NodeName, o.BootIDPath = "node-a", ""
	o.PluginDataDir, o.RegistrarDir, o.CDIDir = filepath.Join(root, "data"), filepath.Join(root, "reg"), filepath.Join(root, "cdi")
	o.SysfsRoot, o.ProcRoot, o.DevRoot = m.SysfsRoot(), m.ProcRoot(), m.DevRoot()
	o.CNMON, o.DevCharDir = m.Path(simulated.CambriconCNMON), m.DevCharDir()
	if err := os.MkdirAll(o.PluginDataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(o.PluginDataDir, "smlus.json")
	corrupt := []byte(`{"instances":[{"claim":"c1","device":"mlu-3","card":3,"id":1,"vcore":25,"memoryMB":2048}],"smluOn":[3`)
	if err := os.WriteFile(ledger, corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()

	if _, err := Start(ctx, o, client, Host{CNMON: m.CNMON}); !errors.Is(err, plugin.ErrCorruptLedger) {
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
