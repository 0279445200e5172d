package plugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// ledgerBackend reads its instance ledger when it discovers, as the
// Ascend and Cambricon backends do.
type ledgerBackend struct {
	*fakeBackend
	ledger *LedgerFile[listEntry, NoLedgerExtra]
}

func (b *ledgerBackend) Discover(ctx context.Context) (*Inventory, error) {
	if _, err := b.ledger.Load(); err != nil {
		return nil, err
	}
	return b.fakeBackend.Discover(ctx)
}

// TestUnreadableLedgerRefusesToStart: an instance ledger that does not
// decode, met by the backend at start-up, stops the plugin from starting
// with an event on the node whose reason says what is wrong and whose
// message names the file and what makes the plugin serve again; the
// ledger is left as it is.
func TestUnreadableLedgerRefusesToStart(t *testing.T) {
	for name, tc := range map[string]struct {
		content    string
		wantReason string
		wantErr    error
		wantText   string
	}{
		"corrupt": {
			content:    `[{"claim":"uid-a","device":"npu-0-vir05-1c-16g-0","card":0`,
			wantReason: "LedgerCorrupt", wantErr: ErrCorruptLedger, wantText: "until the file is repaired",
		},
		"later version": {
			content:    `{"version":"vnpus/v2","vnpus":[]}`,
			wantReason: "LedgerVersionUnknown", wantErr: ErrUnknownLedgerVersion, wantText: "until a release that reads it runs",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "vnpus.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			client := fake.NewClientset()
			backend := &ledgerBackend{fakeBackend: &fakeBackend{devices: gpus("gpu-0")}, ledger: NewListLedgerFile[listEntry](path)}
			_, err := Start(ctx, Config{DriverName: testDriver, NodeName: "node-a", KubeClient: client, Backend: backend,
				PluginDataDir: dir, RegistrarDir: filepath.Join(dir, "reg"), CDIDir: filepath.Join(dir, "cdi")})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("start: %v, want %v", err, tc.wantErr)
			}

			events, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(events.Items) != 1 {
				t.Fatalf("events %+v, want one", events.Items)
			}
			ev := events.Items[0]
			if ev.Reason != tc.wantReason || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "node-a" {
				t.Errorf("event %s %s on %s %s, want a %s warning on node node-a", ev.Type, ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, tc.wantReason)
			}
			for _, want := range []string{path, "refusing to serve", tc.wantText} {
				if !strings.Contains(ev.Message, want) {
					t.Errorf("event message %q does not say %q", ev.Message, want)
				}
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, []byte(tc.content)) {
				t.Errorf("the ledger was changed to %q", got)
			}
		})
	}
}
