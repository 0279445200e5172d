package nvidia

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/hardware"
)

// TestToolsFindTheDriversLibraries: nvidia-smi and
// nvidia-cuda-mps-control are the host's programs and load the driver's
// libraries from the driver root, which is not on the plugin image's
// loader path: they run with the NVML library's folder on it.
func TestToolsFindTheDriversLibraries(t *testing.T) {
	dir := t.TempDir()
	seen := filepath.Join(dir, "seen")
	tool := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho \"$LD_LIBRARY_PATH\" > "+seen+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	libs := "/driver-root/usr/lib/x86_64-linux-gnu"
	if err := (ExecTimeSlice{Binary: tool, LibraryDir: libs}).SetTimeSlice(context.Background(), "GPU-1", 2); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(got)), libs) {
		t.Errorf("nvidia-smi ran with LD_LIBRARY_PATH %q, want %s first", got, libs)
	}
}

// TestWedgedToolIsKilled: a tool that never returns (and started a
// child that holds its output open) fails the call after the deadline,
// and nothing it started is left running.
func TestWedgedToolIsKilled(t *testing.T) {
	defer func(d time.Duration) { ToolTimeout = d }(ToolTimeout)
	ToolTimeout = 300 * time.Millisecond
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	tool := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\nsleep 60 &\necho $! > "+pidFile+"\nwait\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := (ExecTimeSlice{Binary: tool}).SetTimeSlice(context.Background(), "GPU-1", 1)
	if err == nil {
		t.Fatal("a wedged nvidia-smi returned success")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the call returned after %s", took)
	}
	raw, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid := strings.TrimSpace(string(raw))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + pid); os.IsNotExist(err) {
			break
		}
		if stat, _ := os.ReadFile("/proc/" + pid + "/stat"); strings.Contains(string(stat), ") Z ") {
			break // killed, not reaped yet
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tool's child %s is still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHAMiCoreCheckedBeforeUse: a HAMi-core share is refused before
// anything is recorded when the library is missing or is not a shared
// library, naming the library; with a real shared library it validates.
func TestHAMiCoreCheckedBeforeUse(t *testing.T) {
	ctx, b, _ := discovered(t, hardware.DGXH100())
	share := claimRequest("hami", plugin.AllocatedDevice{Request: "r", Device: "gpu-3",
		ConsumedCapacity: map[resourceapi.QualifiedName]string{"cores": "25", "memory": "20Gi"}, Config: effective(t, sharingConfig(`{"strategy":"HAMiCore"}`))})
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libvgpu.so")
	if err := os.WriteFile(notELF, []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing.so"), notELF} {
		b.cfg.HAMiCoreCheck = path
		err := b.Validate(ctx, share)
		if err == nil || !strings.Contains(err.Error(), "HAMi-core's library "+b.cfg.HAMiCoreLibrary) {
			t.Errorf("HAMi share with %s: %v, want refused naming the library", path, err)
		}
	}
	var lib string
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			lib = p
			break
		}
	}
	if lib == "" {
		t.Skip("no shared library on this machine to check against")
	}
	b.cfg.HAMiCoreCheck = lib
	if err := b.Validate(ctx, share); err != nil {
		t.Errorf("HAMi share with a shared library: %v", err)
	}
}

// TestToolThatLeavesADaemon: nvidia-cuda-mps-control -d exits at once
// and leaves its daemon running; a daemon that keeps the program's
// output open does not turn that success into an error.
func TestToolThatLeavesADaemon(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "nvidia-cuda-mps-control")
	// The stand-in answers every query.
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n[ \"$1\" = -d ] && { sleep 3 & exit 0; }\ncat >/dev/null; exit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := (ExecMPS{Command: []string{tool}, StateDir: dir}).Ensure(context.Background(), "GPU-1", filepath.Join(dir, "mps", "GPU-1")); err != nil {
		t.Errorf("a control program that started its daemon and exited 0: %v", err)
	}
}
