// Package fileutil holds the file primitives Strata's node agents build
// their state on: replacing a file so that a crash leaves the old or the
// new content, and an exclusive flock(2) whose wait can be cancelled.
package fileutil

import (
	"os"
	"path/filepath"
)

// WriteAtomic replaces path with data so that a crash leaves either the
// old or the new content: a temporary file in the same folder, synced,
// renamed over path, and the folder synced.
func WriteAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
