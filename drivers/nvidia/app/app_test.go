package app

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestFlagsSetOptions(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("nvidia-kubelet-plugin", flag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{"--node-name=dgx-7", "--mig-mode=dynamic", "--health-interval=2s", "--mps-control=", "--cdi-dir=/etc/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	if o.NodeName != "dgx-7" || o.MIGMode != "dynamic" || o.HealthInterval != 2*time.Second || o.MPSControl != "" || o.CDIDir != "/etc/cdi" {
		t.Errorf("options after flags: %+v", o)
	}
	if o.SysfsRoot != "/sys" || o.NvidiaSMI != "nvidia-smi" {
		t.Errorf("flags not given changed their defaults: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	o := NewOptions()
	o.NodeName, o.MIGMode, o.HealthInterval = "", "sometimes", 0
	err := o.Validate()
	for _, want := range []string{"--node-name", "--mig-mode", "--health-interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// TestPodUIDFlag: the pod UID comes from $POD_UID, as the DaemonSet sets
// it from the downward API, or from --pod-uid, whose help says what an
// empty one means.
func TestPodUIDFlag(t *testing.T) {
	t.Setenv("POD_UID", "6f1c2a4e-0d7b-4c52-9a57-3c1e8d2b7f10")
	for args, want := range map[string]types.UID{
		"":                  "6f1c2a4e-0d7b-4c52-9a57-3c1e8d2b7f10",
		"--pod-uid=abc-123": "abc-123",
		"--pod-uid=":        "",
	} {
		o := NewOptions()
		fs := flag.NewFlagSet("nvidia-kubelet-plugin", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		if o.PodUID != want {
			t.Errorf("flags %q: pod UID %q, want %q", args, o.PodUID, want)
		}
		if usage := fs.Lookup("pod-uid").Usage; !strings.Contains(usage, "$POD_UID") || !strings.Contains(usage, "Empty means no rolling-update support") {
			t.Errorf("--pod-uid help does not say where the UID comes from and what empty means: %q", usage)
		}
	}
	o := NewOptions()
	o.NodeName, o.PodUID = "dgx-7", "a/b"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--pod-uid") {
		t.Errorf("pod UID with a slash: %v", err)
	}
}

// TestFindLibrary: the first existing candidate is loaded; none existing
// is an error that lists them; no candidates leaves it to the loader.
func TestFindLibrary(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := findLibrary(filepath.Join(dir, "usr/lib64/libnvidia-ml.so.1") + ":" + lib)
	if err != nil || got != lib {
		t.Errorf("findLibrary = %q, %v; want %q", got, err, lib)
	}
	if _, err := findLibrary(filepath.Join(dir, "nope.so")); err == nil || !strings.Contains(err.Error(), "nope.so") {
		t.Errorf("missing library: %v", err)
	}
	if got, err := findLibrary(""); got != "" || err != nil {
		t.Errorf("empty list: %q, %v", got, err)
	}
}
