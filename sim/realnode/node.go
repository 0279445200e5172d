package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Spec describes one real node.
type Spec struct {
	// Name is the node's name; the API server reaches its kubelet by it
	// (see controlplane's kubelet dialer).
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// MaxPods defaults to 110.
	MaxPods int
	// Kubeconfig is the kubelet's credentials for the API server.
	Kubeconfig string
	// Verbosity is the kubelet's --v.
	Verbosity int
}

// Node is a running real node: its containerd and kubelet, started by
// this process.
type Node struct {
	// Dir holds everything the node writes.
	Dir string
	// Port is the kubelet's port on 127.0.0.1.
	Port int

	spec   Spec
	tools  Tools
	client kubernetes.Interface

	mu         sync.Mutex
	containerd *process
	kubelet    *process
	stopped    bool
}

// process is a program the harness started, in its own process group.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// maxSocketPath is the longest path a unix socket can be bound to.
const maxSocketPath = 107

// CgroupRoot is the parent of every cgroup a node makes, one folder per
// node below it.
const CgroupRoot = "strata-realnode"

func (n *Node) cgroupRoot() string { return "/" + CgroupRoot + "/" + n.spec.Name }
func (n *Node) socket() string     { return filepath.Join(n.Dir, stateDir, socketName) }

// Start starts containerd and kubelet for spec in dir (which must be
// short: see the layout in config.go), imports the images in archives and
// returns once the Node is Ready in the API server.
func Start(ctx context.Context, tools Tools, dir string, spec Spec, client kubernetes.Interface, archives ...string) (_ *Node, finalErr error) {
	if err := CanRun(); err != nil {
		return nil, err
	}
	if spec.MaxPods == 0 {
		spec.MaxPods = 110
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &Node{Dir: dir, Port: port, spec: spec, tools: tools, client: client}
	hostDirs.acquire()
	defer func() {
		if finalErr != nil {
			n.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := n.layout(); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	for _, a := range archives {
		if err := n.importImage(ctx, a); err != nil {
			return nil, err
		}
	}
	if err := n.StartKubelet(ctx); err != nil {
		return nil, err
	}
	if err := n.WaitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	return n, nil
}

// layout creates the node's folders, configuration files and cgroups.
func (n *Node) layout() error {
	for _, d := range []string{kubeletDir, containerdDir, stateDir, cdiDir, logsDir, manifestsDir, cniConfDir} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	// The longest socket a plugin makes: its registration socket during
	// a rolling update, named by driver and pod UID.
	if sock := filepath.Join(n.Dir, kubeletDir, "plugins_registry", "cambricon.strata.sh-"+strings.Repeat("0", 32)+"-reg.sock"); len(sock) > maxSocketPath {
		return fmt.Errorf("node folder %s is too long: kubelet plugin sockets such as %s would pass the %d bytes of a unix socket path", n.Dir, sock, maxSocketPath)
	}
	if err := n.mountShared(); err != nil {
		return err
	}
	kc, err := n.kubeletConfig()
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"containerd.toml": []byte(n.containerdConfig()),
		"kubelet.yaml":    kc,
		filepath.Join(cniConfDir, "10-lo.conflist"): []byte(cniConfig),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(n.Dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return makeCgroups(n.cgroupRoot())
}

// mountShared bind-mounts the node's folder onto itself and makes it
// shared. A real node's root is a shared mount (systemd makes it so), and
// pods whose volumes ask for mount propagation (the NVIDIA plugin's
// driver root) need their host path on one; kubelet does the same with
// its root.
func (n *Node) mountShared() error {
	if err := unix.Mount(n.Dir, n.Dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mount the node folder: %w", err)
	}
	if err := unix.Mount("", n.Dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make the node folder a shared mount: %w", err)
	}
	return nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	p, err := n.start(ctx, "containerd", n.tools.Containerd, "--config", filepath.Join(n.Dir, "containerd.toml"))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.containerd = p
	n.mu.Unlock()
	// Ready once ctr gets an answer over its socket.
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("containerd exited: %v (log: %s)", p.err, n.logFile("containerd"))
		default:
		}
		return n.ctr(ctx, "version") == nil, nil
	})
}

// StartKubelet starts the node's kubelet (again, after StopKubelet).
func (n *Node) StartKubelet(ctx context.Context) error {
	n.mu.Lock()
	if n.kubelet != nil {
		n.mu.Unlock()
		return errors.New("kubelet is running")
	}
	n.mu.Unlock()
	p, err := n.start(ctx, "kubelet", n.tools.Kubelet, n.kubeletArgs()...)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
	return nil
}

// StopKubelet stops the kubelet as a service manager would (SIGTERM,
// then SIGKILL), leaving containers running.
func (n *Node) StopKubelet() {
	n.mu.Lock()
	p := n.kubelet
	n.kubelet = nil
	n.mu.Unlock()
	p.stop(10 * time.Second)
}

// WaitReady waits for the Node to be Ready.
func (n *Node) WaitReady(ctx context.Context, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n.mu.Lock()
		k := n.kubelet
		n.mu.Unlock()
		if k != nil {
			select {
			case <-k.done:
				return false, fmt.Errorf("kubelet exited: %v (log: %s)", k.err, n.logFile("kubelet"))
			default:
			}
		}
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.spec.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = "not registered"
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s is not Ready (%s; kubelet log %s): %w", n.spec.Name, last, n.logFile("kubelet"), err)
	}
	return nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.spec.Name }

// CDIDir is the folder containerd reads CDI specs from.
func (n *Node) CDIDir() string { return filepath.Join(n.Dir, cdiDir) }

// KubeletDir is kubelet's root folder: plugins/ and plugins_registry/
// are below it.
func (n *Node) KubeletDir() string { return filepath.Join(n.Dir, kubeletDir) }

// ManifestsDir is the kubelet's static pod folder.
func (n *Node) ManifestsDir() string { return filepath.Join(n.Dir, manifestsDir) }

func (n *Node) logFile(name string) string { return filepath.Join(n.Dir, logsDir, name+".log") }

// start runs a program in its own process group with its output in the
// node's log folder.
func (n *Node) start(ctx context.Context, name, bin string, args ...string) (*process, error) {
	log, err := os.OpenFile(n.logFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// The kubelet's container log links (a relative ContainerLogsDir,
	// see hack/realnode/install.sh) land in the node's folder.
	cmd.Dir = filepath.Join(n.Dir, logsDir)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(n.tools.Shim)+":"+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	klog.FromContext(ctx).V(2).Info("Started", "node", n.spec.Name, "program", name, "pid", cmd.Process.Pid)
	return p, nil
}

// stop signals the process group with SIGTERM and, after grace, SIGKILL.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// ctr runs ctr against the node's containerd in the k8s.io namespace.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.tools.Ctr, append([]string{"--address", n.socket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %v: %w: %s", args, err, out)
	}
	return nil
}

// importImage imports an OCI image archive (Image.WriteArchive).
func (n *Node) importImage(ctx context.Context, archive string) error {
	return n.ctr(ctx, "images", "import", "--local", archive)
}

// ImportImage imports an image archive into the node's containerd.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	return n.importImage(ctx, archive)
}

// Stop stops the kubelet, every container of the node, their shims and
// containerd, unmounts what they mounted under the node's folder and
// removes the node's cgroups. The Node object stays in the API server.
func (n *Node) Stop(ctx context.Context) {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	n.stopped = true
	n.mu.Unlock()
	n.StopKubelet()
	n.stopRuntime(ctx)
	hostDirs.release()
}

// stopRuntime kills the node's containers and shims, stops containerd and
// unmounts everything under the node's folder: what a power cut leaves.
func (n *Node) stopRuntime(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if err := killCgroup(n.cgroupRoot()); err != nil {
		logger.Error(err, "Killing the node's containers", "node", n.spec.Name)
	}
	killShims(n.socket())
	n.mu.Lock()
	c := n.containerd
	n.containerd = nil
	n.mu.Unlock()
	c.stop(10 * time.Second)
	if err := unmountUnder(n.Dir); err != nil {
		logger.Error(err, "Unmounting the node's folder", "node", n.spec.Name)
	}
	if err := removeCgroups(n.cgroupRoot()); err != nil {
		logger.Error(err, "Removing the node's cgroups", "node", n.spec.Name)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// KillProcesses sends SIGKILL to the processes in the node's cgroups
// (its containers) whose program is named name, as the OOM killer or a
// crash would end them, and returns how many it signalled.
func (n *Node) KillProcesses(name string) (int, error) {
	pids, err := cgroupPIDs(n.cgroupRoot())
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, pid := range pids {
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		if err != nil || filepath.Base(exe) != name {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		}
	}
	return killed, nil
}

// ContainerLogs returns the logs the kubelet keeps of the containers of
// pods in namespace whose name starts with prefix, newest attempt last,
// by file: what a test prints when a static pod (which has no API
// server-side logs while it fails) does not come up.
func (n *Node) ContainerLogs(namespace, prefix string) map[string]string {
	files, _ := filepath.Glob(filepath.Join(n.Dir, logsDir, "pods", namespace+"_"+prefix+"*", "*", "*.log"))
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		out[f] = string(data)
	}
	return out
}

// Reboot plays a power cycle of the node: the kubelet, every container,
// the shims and containerd stop at once; what lives in memory on a real
// host goes (the runtime's state folder, the CDI specs of /var/run/cdi,
// pod volume mounts, the cgroups); then hardware runs (the machine's own
// reset: a new boot id, devices' state gone) and the node starts again
// from its disk (kubelet's root, containerd's images and metadata, the
// plugins' checkpoints), and Reboot returns once it is Ready.
func (n *Node) Reboot(ctx context.Context, hardware func() error) error {
	n.StopKubelet()
	n.stopRuntime(ctx)
	for _, d := range []string{stateDir, cdiDir} {
		if err := os.RemoveAll(filepath.Join(n.Dir, d)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if hardware != nil {
		if err := hardware(); err != nil {
			return fmt.Errorf("reset the node's hardware: %w", err)
		}
	}
	if err := n.mountShared(); err != nil {
		return err
	}
	if err := makeCgroups(n.cgroupRoot()); err != nil {
		return err
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	if err := n.StartKubelet(ctx); err != nil {
		return err
	}
	return n.WaitReady(ctx, 2*time.Minute)
}
