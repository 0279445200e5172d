package fileutil

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

// TestWriteAtomicReplacesAndLeavesNoTemporaryFile: the file holds the
// last content written, and nothing else is left in its folder, also
// when a write fails.
func TestWriteAtomicReplacesAndLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{`{"v":1}`, `{"v":2}`} {
		if err := WriteAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(content, string(got)); diff != "" {
			t.Errorf("content (-want +got):\n%s", diff)
		}
	}
	if err := WriteAtomic(filepath.Join(dir, "missing", "state.json"), []byte("x")); err == nil {
		t.Errorf("write into a missing folder succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"state.json"}, names); diff != "" {
		t.Errorf("files in the folder (-want +got):\n%s", diff)
	}
}

// TestLockExcludesAnotherHolder: a second holder, in the same process,
// waits while the lock is held, gives up with an error naming the holder
// when its context ends, and gets the lock once it is released.
func TestLockExcludesAnotherHolder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := Lock{Path: filepath.Join(t.TempDir(), "x.lock"), Holder: "another test"}
	release, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(waitCtx); err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "held by another test") {
		t.Errorf("acquire while held: %v, want a deadline error naming the holder", err)
	}

	got := make(chan error, 1)
	go func() {
		r, err := l.Acquire(ctx)
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("acquire after release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("acquire after release still waits")
	}
}

// TestLockFileThatCannotBeOpened names the file.
func TestLockFileThatCannotBeOpened(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "missing", "x.lock")
	if _, err := (Lock{Path: path}).Acquire(ctx); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("acquire in a missing folder: %v, want an error naming %s", err, path)
	}
}
