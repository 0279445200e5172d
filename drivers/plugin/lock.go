package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// lockFileName is the file in the plugin data directory that every
// instance of a plugin on a node locks while it reads or changes the
// shared state: the checkpoint, the CDI specs and the hardware. Two
// instances run at once during a rolling update of the DaemonSet
// (Config.RollingUpdateUID). It is not the kubelet plugin helper's
// serialize.lock: the helper locks that one around gRPC calls only, with
// another kind of lock (OFD), and not around start-up.
const lockFileName = "plugin.lock"

// lockPollMax bounds the wait between two tries to take a busy lock.
const lockPollMax = 50 * time.Millisecond

// fileLock is an exclusive flock(2) on a file. Each acquisition opens the
// file anew, so two holders in one process exclude each other as two
// processes do. The kernel releases the lock of a process that dies.
type fileLock struct {
	path string
}

// acquire takes the lock, waiting while another instance holds it, until
// ctx ends. The returned function releases it and must be called.
func (l fileLock) acquire(ctx context.Context) (release func(), err error) {
	fd, err := unix.Open(l.path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", l.path, err)
	}
	release = func() {
		_ = unix.Flock(fd, unix.LOCK_UN)
		_ = unix.Close(fd)
	}
	// Polling rather than a blocking flock keeps the wait cancellable: a
	// kubelet call that times out must not leave a goroutine stuck here.
	wait, waited := time.Millisecond, false
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return release, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("lock %s: %w", l.path, err)
		}
		if !waited {
			klog.FromContext(ctx).V(2).Info("Waiting for another instance of the plugin to release its lock", "lockFile", l.path)
			waited = true
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			_ = unix.Close(fd)
			return nil, fmt.Errorf("wait for lock %s, held by another instance of the plugin: %w", l.path, context.Cause(ctx))
		case <-timer.C:
		}
		wait = min(2*wait, lockPollMax)
	}
}
