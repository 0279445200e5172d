package cambricon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-sh/strata/hardware"
)

func writeProcDevices(t *testing.T, lines ...string) string {
	t.Helper()
	dir := t.TempDir()
	body := "Character devices:\n  1 mem\n" + strings.Join(lines, "\n") + "\n\nBlock devices:\n  8 sd\n"
	if err := os.WriteFile(filepath.Join(dir, "devices"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The regions every container needs refuse start-up when missing; an
// optional one (the IPC region) leaves its node out. No prepare ever
// hands out a node numbered 0:N.
func TestMissingRegionsNeverMakeNodeZero(t *testing.T) {
	ctl := fmt.Sprintf("%d %s", hardware.CambriconCtlMajor, procCtl)
	dev := fmt.Sprintf("%d %s", hardware.CambriconDevMajor, procDev)
	capRegion := fmt.Sprintf("%d %s", hardware.CambriconCapMajor, procCap)
	for _, c := range []struct {
		name  string
		lines []string
	}{
		{"no cambricon_ctl", []string{dev, capRegion}},
		{"no cambricon_dev", []string{ctl, capRegion}},
	} {
		if m, err := readMajors(writeProcDevices(t, c.lines...)); err == nil {
			t.Errorf("%s: majors %+v read", c.name, m)
		}
	}

	tool := newTool(t)
	proc := writeProcDevices(t, ctl, dev, capRegion) // no cn_rpmsg
	ctx, b, _ := newBackend(t, tool, t.TempDir(), func(c *Config) { c.ProcRoot = proc })
	resp, err := b.Prepare(ctx, request("c1", whole("mlu-0"), part("mlu-1", "10", "1Gi")))
	if err != nil {
		t.Fatal(err)
	}
	all := resp.Common.DeviceNodes
	for _, d := range resp.Devices {
		all = append(all, d.Edits.DeviceNodes...)
	}
	for _, n := range all {
		if n.Major <= 0 {
			t.Errorf("node %s has major %d", n.Path, n.Major)
		}
		if strings.Contains(n.Path, "ipcm") {
			t.Errorf("node %s of a region /proc/devices does not list", n.Path)
		}
	}
	if len(all) != 4 {
		t.Errorf("nodes %v, want the control node, two card nodes and a capability node", nodes(all))
	}
}
