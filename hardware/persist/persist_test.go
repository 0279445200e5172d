package persist

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-sh/strata/hardware/npusmimock"
)

func isSet(args []string) bool { return len(args) > 0 && args[0] == "set" }

// TestOpenReplaysWhatChangedTheState: a successful state change is kept
// and replayed; a refusal and a query are not recorded.
func TestOpenReplaysWhatChangedTheState(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "state")
	open := func() (*Tool, *npusmimock.NPUSMI) {
		smi, err := npusmimock.New(npusmimock.Model910B3, 2)
		if err != nil {
			t.Fatal(err)
		}
		tool, err := Open(ctx, file, smi, isSet)
		if err != nil {
			t.Fatal(err)
		}
		return tool, smi
	}
	tool, _ := open()
	if _, err := tool.Run(ctx, "set", "-t", "create-vnpu", "-i", "1", "-c", "0", "-f", "vir05_1c_16g", "-v", "116"); err != nil {
		t.Fatal(err)
	}
	_, err := tool.Run(ctx, "set", "-t", "create-vnpu", "-i", "1", "-c", "0", "-f", "no-such-template")
	if code, ok := IsExit(err); !ok || code == 0 {
		t.Fatalf("a bad template: %v, want npu-smi's refusal", err)
	}
	if _, err := tool.Run(ctx, "info", "-t", "info-vnpu", "-i", "1", "-c", "0"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "vir05_1c_16g") {
		t.Errorf("recorded %q, want only the vNPU's creation", lines)
	}
	_, smi := open()
	if got := smi.VNPUs(); len(got) != 1 || got[0] != 116 {
		t.Errorf("replayed vNPUs %v, want [116]", got)
	}
}
