package realnode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// hostDirs are the folders outside a node's own that kubelet and the
// containerd shims hard-code. The harness removes each one it found
// missing when the last node of the process stops.
var hostDirs = &sharedHostDirs{paths: []string{
	"/var/lib/kubelet/device-plugins", // kubelet's device plugin socket
	"/run/containerd/s",               // the shims' sockets
}}

type sharedHostDirs struct {
	paths []string

	mu      sync.Mutex
	users   int
	created []string
}

func (h *sharedHostDirs) acquire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users == 0 {
		h.created = nil
		for _, p := range h.paths {
			// Record the highest missing ancestor: that is what appears.
			missing := ""
			for dir := p; dir != "/"; dir = filepath.Dir(dir) {
				if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
					missing = dir
				}
			}
			if missing != "" {
				h.created = append(h.created, missing)
			}
		}
	}
	h.users++
}

func (h *sharedHostDirs) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.users--
	if h.users > 0 {
		return
	}
	for _, dir := range h.created {
		os.RemoveAll(dir)
	}
	h.created = nil
}

// cgroupMounts returns the mount points of every cgroup hierarchy (v1
// controllers and the unified one).
func cgroupMounts() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fstype := strings.Fields(post)[0]
		fields := strings.Fields(pre)
		if (fstype == "cgroup" || fstype == "cgroup2") && len(fields) > 4 {
			out = append(out, fields[4])
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// makeCgroups creates the node's cgroup root in every hierarchy, with
// the parent's CPUs and memory nodes for cpuset (a v1 cpuset without
// them takes no task).
func makeCgroups(root string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := m
		for _, part := range strings.Split(strings.Trim(root, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if v, err := os.ReadFile(filepath.Join(parent, f)); err == nil {
					if cur, _ := os.ReadFile(filepath.Join(dir, f)); len(bytes.TrimSpace(cur)) == 0 {
						_ = os.WriteFile(filepath.Join(dir, f), v, 0o644)
					}
				}
			}
		}
	}
	return nil
}

// cgroupPIDs lists the processes in root's subtree of every hierarchy.
func cgroupPIDs(root string) ([]int, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, m := range mounts {
		_ = filepath.WalkDir(filepath.Join(m, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	return slices.Sorted(func(yield func(int) bool) {
		for pid := range seen {
			if !yield(pid) {
				return
			}
		}
	}), nil
}

// killCgroup kills every process of the node's cgroups (its containers)
// until none is left.
func killCgroup(root string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids, err := cgroupPIDs(root)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of cgroup %s survive SIGKILL", pids, root)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroups removes the node's cgroups, deepest first.
func removeCgroups(root string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(m, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := removeCgroup(d); err != nil {
				errs = append(errs, err)
			}
		}
		// The shared parent goes with its last node.
		_ = syscall.Rmdir(filepath.Join(m, CgroupRoot))
	}
	return errors.Join(errs...)
}

// removeCgroup retries for a moment: a killed process leaves its cgroup
// a little after it is reaped.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

// killShims kills the containerd shims serving the containerd at
// socket: they are found by the address on their command line, so only
// this node's shims are touched.
func killShims(socket string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// unmountUnder detaches every mount below dir, deepest first: the
// kubelet's root bind mount, pod volumes, container root filesystems,
// sandbox /dev/shm and network namespace files.
func unmountUnder(dir string) error {
	dir = filepath.Clean(dir)
	var errs []error
	for range 5 {
		points, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists mount points at or below dir, longest path first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
