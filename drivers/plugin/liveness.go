package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/internal/fileutil"
)

// Liveness: a plugin whose vendor call hangs holds the driver's lock, and
// every prepare, unprepare and republish waits behind it, with nothing to
// show for it. A watchdog takes the lock every LivenessInterval and
// records when it last got it in a file of the plugin's own (one per pod:
// during a rolling update two instances share the data folder). The
// DaemonSet's exec probe runs the plugin binary with "probe" (package
// pluginmain), which reads the file through Probe: the plugin is live
// while it got the lock within StuckAfter, and ready once it serves.

// Liveness timing.
const (
	LivenessInterval = 5 * time.Second
	// StuckAfter is how long the lock may be held before the plugin
	// counts as hung: longer than any bounded vendor call.
	StuckAfter = 2 * time.Minute
)

// livenessState is what the watchdog writes.
type livenessState struct {
	// LockFree is when the watchdog last got the driver's lock.
	LockFree time.Time `json:"lockFree"`
	// Ready is set once the plugin serves.
	Ready bool `json:"ready"`
}

// livenessFile is where an instance records its liveness.
func livenessFile(dataDir, podUID string) string {
	if podUID == "" {
		podUID = "plugin"
	}
	return filepath.Join(dataDir, "liveness-"+podUID+".json")
}

// watchLiveness runs the watchdog until ctx ends, and removes the file.
func (d *Driver) watchLiveness(ctx context.Context) {
	path := livenessFile(d.cfg.PluginDataDir, string(d.cfg.RollingUpdateUID))
	defer os.Remove(path)
	logger := klog.FromContext(ctx)
	got := make(chan time.Time, 1)
	for {
		// While the lock is held this waits, the file keeps the last time
		// it was free, and the probe sees it age.
		go func() {
			d.mu.Lock()
			d.mu.Unlock() //nolint:staticcheck // taking the lock is the check
			got <- time.Now()
		}()
		var free time.Time
		select {
		case <-ctx.Done():
			return
		case free = <-got:
		}
		raw, _ := json.Marshal(livenessState{LockFree: free, Ready: true})
		if err := fileutil.WriteAtomic(path, raw); err != nil {
			logger.Error(err, "Writing the liveness file failed", "path", path)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(LivenessInterval):
		}
	}
}

// Probe judges the plugin instance of podUID from its liveness file: an
// error when it is not ready yet or has not got its lock within
// StuckAfter. A file not updated within StuckAfter means the watchdog is
// stuck behind the lock.
func Probe(dataDir, podUID string, now time.Time) error {
	path := livenessFile(dataDir, podUID)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("not serving yet (no %s)", path)
	}
	if err != nil {
		return err
	}
	var st livenessState
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if held := now.Sub(st.LockFree); held > StuckAfter {
		return fmt.Errorf("the plugin has held its lock for %s (a vendor call or the API server is not answering)", held.Round(time.Second))
	}
	return nil
}
