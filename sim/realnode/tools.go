// Package realnode joins real Kubernetes nodes to an in-process control
// plane: each node is a real kubelet (v1.37, built from k8s.io/kubernetes)
// with its own containerd 2.x and runc, running real containers from a
// small local image. Strata's kubelet plugins run on such a node as static
// pods from their images, on fake hardware at the lowest layer, so a test
// reads what a container actually sees after containerd applied the
// plugin's CDI spec.
//
// Everything a node writes lives under its folder: kubelet's root, pod
// logs, containerd's root and state, runc's state, CDI specs, the cgroup
// tree (one per node, under its own cgroup root). What kubelet and the
// shims hard-code outside it (/var/lib/kubelet/device-plugins,
// /run/containerd/s) is removed when the last node stops, if the harness
// made it. Only processes the harness started, and the containers they
// started, are stopped. docs/real-nodes.md describes the layout.
package realnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ToolsEnv names the folder of the programs a real node runs (containerd,
// containerd-shim-runc-v2, ctr, kubelet); hack/realnode/install.sh prints
// it and make sets it for the tests.
const ToolsEnv = "STRATA_REALNODE_TOOLS"

// Tools are the programs of a real node.
type Tools struct {
	Containerd string
	Shim       string
	Ctr        string
	Kubelet    string
	Runc       string
	// CNIDir holds the CNI plugins containerd loads its network with.
	CNIDir string
	// Busybox is a statically linked busybox, the userland of the image
	// pods run.
	Busybox string
}

// FindTools locates the programs, from $STRATA_REALNODE_TOOLS and the
// system's PATH. The error says what is missing and how to install it.
func FindTools() (Tools, error) { return FindToolsIn(os.Getenv(ToolsEnv)) }

// FindToolsIn locates the programs in dir (hack/realnode/install.sh's
// folder) and on the PATH.
func FindToolsIn(dir string) (Tools, error) {
	if dir == "" {
		return Tools{}, fmt.Errorf("$%s is not set: run hack/realnode/install.sh (make realnode-tools) and set it to the folder it prints", ToolsEnv)
	}
	t := Tools{
		Containerd: filepath.Join(dir, "containerd"),
		Shim:       filepath.Join(dir, "containerd-shim-runc-v2"),
		Ctr:        filepath.Join(dir, "ctr"),
		Kubelet:    filepath.Join(dir, "kubelet"),
		CNIDir:     "/usr/lib/cni",
		Busybox:    "/bin/busybox",
	}
	var errs []error
	for _, p := range []string{t.Containerd, t.Shim, t.Ctr, t.Kubelet, t.Busybox, filepath.Join(t.CNIDir, "loopback")} {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, err)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		errs = append(errs, fmt.Errorf("runc: %w", err))
	}
	t.Runc = runc
	if err := errors.Join(errs...); err != nil {
		return Tools{}, fmt.Errorf("real-node tools missing (run hack/realnode/install.sh): %w", err)
	}
	return t, nil
}

// CanRun says why this machine cannot run real nodes, or nil: they need
// root (containers, mounts, cgroups, device nodes) and overlayfs.
func CanRun() error {
	if os.Geteuid() != 0 {
		return errors.New("real nodes need root: containerd, runc and the kubelet mount, make cgroups and device nodes")
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	if !strings.Contains(string(fs), "overlay") {
		return errors.New("real nodes need overlayfs (containerd's snapshotter); the kernel does not list it")
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return fmt.Errorf("real nodes need cgroups: %w", err)
	}
	return nil
}
