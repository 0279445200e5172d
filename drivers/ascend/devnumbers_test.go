package ascend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A driver region missing from /proc/devices is an error naming it,
// never a major of 0.
func TestReadMajorsRefusesMissingRegion(t *testing.T) {
	full := map[string]string{procDavinci: "236", procManager: "237", procSVM: "238", procHDC: "239"}
	for _, missing := range []string{procDavinci, procManager, procSVM, procHDC} {
		t.Run(missing, func(t *testing.T) {
			dir := t.TempDir()
			var b strings.Builder
			b.WriteString("Character devices:\n  1 mem\n")
			for _, name := range []string{procDavinci, procManager, procSVM, procHDC} {
				if name != missing {
					b.WriteString(full[name] + " " + name + "\n")
				}
			}
			b.WriteString("\nBlock devices:\n  8 sd\n")
			if err := os.WriteFile(filepath.Join(dir, "devices"), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := readMajors(dir)
			if err == nil {
				t.Fatalf("majors %+v read without %s", m, missing)
			}
			if !strings.Contains(err.Error(), "lists no "+missing+" character device") {
				t.Errorf("error %q does not name %s", err, missing)
			}
		})
	}
}

// A backend whose majors lack a region (a driver unloaded under it, or a
// backend built around readMajors) refuses to prepare rather than hand out
// a 0:N node, and makes no vNPU.
func TestPrepareRefusesMissingMajor(t *testing.T) {
	for _, c := range []struct {
		name   string
		majors majors
		device string
		want   string
	}{
		{"hdc", majors{davinci: 236, manager: 237, svm: 238}, "npu-0", "no major for /dev/hisi_hdc: /proc/devices lists no hisi_hdc region"},
		{"svm", majors{davinci: 236, manager: 237, hdc: 239}, "npu-0", "no major for /dev/devmm_svm: /proc/devices lists no devmm_svm region"},
		{"davinci, whole", majors{manager: 237, svm: 238, hdc: 239}, "npu-0", "device npu-0: no major for /dev/davinci0"},
		{"davinci, vNPU", majors{manager: 237, svm: 238, hdc: 239}, "npu-0-vir05-1c-16g-0", "device npu-0-vir05-1c-16g-0: no major for /dev/vdavinci"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tool := newTool(t)
			ctx, b := newBackend(t, tool, t.TempDir())
			b.major = c.majors
			tool.mock.ResetCommands()
			resp, err := b.Prepare(ctx, request("uid-a", c.device))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("prepare: %v, %v; want an error containing %q", resp, err, c.want)
			}
			if vs := tool.all(t); len(vs) != 0 {
				t.Errorf("vNPUs left: %v", vs)
			}
		})
	}
}
