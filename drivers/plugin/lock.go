package plugin

import (
	"path/filepath"

	"github.com/strata-sh/strata/internal/fileutil"
)

// lockFileName is the file in the plugin data directory that every
// instance of a plugin on a node locks, exclusively, while it reads or
// changes the state the instances share: the checkpoint, the CDI specs
// and the hardware. Two instances run at once during a rolling update of
// the DaemonSet (Config.RollingUpdateUID). It is not the kubelet plugin
// helper's serialize.lock: the helper locks that one around gRPC calls
// only, with another kind of lock (OFD), and not around start-up.
const lockFileName = "plugin.lock"

// instanceLock is the lock of the plugin's instances in dataDir.
func instanceLock(dataDir string) fileutil.Lock {
	return fileutil.Lock{Path: filepath.Join(dataDir, lockFileName), Holder: "another instance of the plugin"}
}
