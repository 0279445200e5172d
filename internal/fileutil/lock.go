package fileutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// lockPollMax bounds the wait between two tries to take a busy lock.
const lockPollMax = 50 * time.Millisecond

// Lock is an exclusive flock(2) on the file at Path, which is made if it
// is missing. Each acquisition opens the file anew, so two holders in one
// process exclude each other as two processes do. The kernel releases the
// lock of a process that dies.
type Lock struct {
	Path string
	// Holder names whoever else takes the lock, in messages ("another
	// instance of the plugin"); empty means "another holder".
	Holder string
}

// Acquire takes the lock, waiting while another holder has it, until ctx
// ends. The returned function releases it and must be called.
func (l Lock) Acquire(ctx context.Context) (release func(), err error) {
	fd, err := unix.Open(l.Path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", l.Path, err)
	}
	release = func() {
		_ = unix.Flock(fd, unix.LOCK_UN)
		_ = unix.Close(fd)
	}
	// Polling rather than a blocking flock keeps the wait cancellable: a
	// caller that gives up must not leave a goroutine stuck here.
	wait, waited := time.Millisecond, false
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return release, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("lock %s: %w", l.Path, err)
		}
		if !waited {
			klog.FromContext(ctx).V(2).Info("Waiting for a lock to be released", "lockFile", l.Path, "holder", l.holder())
			waited = true
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			_ = unix.Close(fd)
			return nil, fmt.Errorf("wait for lock %s, held by %s: %w", l.Path, l.holder(), context.Cause(ctx))
		case <-timer.C:
		}
		wait = min(2*wait, lockPollMax)
	}
}

func (l Lock) holder() string {
	if l.Holder == "" {
		return "another holder"
	}
	return l.Holder
}
