package nvmlmock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MPSControlMain is a stand-in for the nvidia-cuda-mps-control program,
// for nodes without GPUs: a real process with a real control endpoint, so
// that the plugin, a daemon pod and a workload container talk to it as
// they would to the real one, and it dies with its process tree as the
// real one does. self is the command that runs this function (the
// program's path and any leading arguments), used to daemonize.
//
// What follows NVIDIA's documentation of the program (the MPS
// documentation, "nvidia-cuda-mps-control" section): "-d" starts the
// control daemon in the background and "-f" in the foreground; without
// either the program is a client that sends each line of its standard
// input to the daemon and prints the replies; the daemon's pipe directory
// is $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) and its log
// directory $CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps), where
// it writes control.log; the commands get_server_list, start_server
// -uid UID, get_client_list PID, shutdown_server PID and quit.
//
// What has no public source and is this fake's choice: the control
// endpoint is a Unix socket named "control" in the pipe directory (the
// real daemon keeps named pipes and sockets there whose protocol is not
// published); a client that finds no daemon prints "Cannot find MPS
// control daemon process" and exits 1; a second daemon on a pipe
// directory whose daemon answers exits 1; start_server makes no process,
// its "PID" is a number derived from the daemon's PID.
//
// Fake-only commands, for tests: "strata-fake watch INTERVAL" (as the
// program's arguments) is a client that starts a server for its user and
// prints the daemon's server list every INTERVAL, forever, as a CUDA
// process keeps using its MPS server; the daemon command "strata-fake
// hang DURATION" makes the daemon stop answering for DURATION, as a
// wedged one does.
func MPSControlMain(self, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	pipeDir := envOr("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
	logDir := envOr("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
	switch {
	case len(args) == 1 && args[0] == "-d":
		return mpsBackground(self, pipeDir, stderr)
	case len(args) == 1 && args[0] == "-f":
		if err := serveMPS(pipeDir, logDir); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	case len(args) == 3 && args[0] == FakeCommand && args[1] == "watch":
		every, err := time.ParseDuration(args[2])
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		watchMPS(pipeDir, every, stdout)
		return 0
	case len(args) == 0:
		return mpsClient(pipeDir, stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "usage: nvidia-cuda-mps-control [-d | -f]\n")
	return 2
}

// FakeCommand starts the fakes' own commands, which the real programs do
// not have.
const FakeCommand = "strata-fake"

// MPSSocket is the fake daemon's control endpoint in its pipe directory.
const MPSSocket = "control"

// errNoDaemon is what a client prints when no daemon answers.
var errNoDaemon = errors.New("Cannot find MPS control daemon process")

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// mpsBackground starts the daemon detached from the caller (its own
// session, no inherited output) and returns once it answers.
func mpsBackground(self []string, pipeDir string, stderr io.Writer) int {
	if _, err := mpsCall(pipeDir, "get_server_list", time.Second); err == nil {
		fmt.Fprintln(stderr, "An instance of this daemon is already running")
		return 1
	}
	cmd := exec.Command(self[0], append(slices.Clone(self[1:]), "-f")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(envOr("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"), "control.log"))
			lines := strings.Split(strings.TrimSpace(string(log)), "\n")
			fmt.Fprintf(stderr, "the daemon exited: %v: %s\n", err, lines[len(lines)-1])
			return 1
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := mpsCall(pipeDir, "get_server_list", time.Second); err == nil {
			return 0
		}
	}
	fmt.Fprintln(stderr, "the daemon did not answer")
	return 1
}

// mpsDaemon is the state of a running fake daemon.
type mpsDaemon struct {
	mu       sync.Mutex
	servers  map[int]int // uid -> server "PID"
	hangTill time.Time
	log      *os.File
}

// serveMPS runs the daemon until quit or a termination signal. Why it
// could not start is in control.log too, for -d to report.
func serveMPS(pipeDir, logDir string) error {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	d := &mpsDaemon{servers: map[int]int{}, log: logFile}
	l, err := d.listen(pipeDir)
	if err != nil {
		d.logf("Control daemon failed to start: %v", err)
		return err
	}
	sock := l.Addr().String()
	d.logf("Control daemon started, pid %d", os.Getpid())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	quit := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-ctx.Done():
		case <-quit:
		}
		l.Close()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			break
		}
		go func() {
			if d.handle(conn) {
				once.Do(func() { close(quit) })
			}
		}()
	}
	_ = os.Remove(sock)
	d.logf("Control daemon exiting")
	return nil
}

func (d *mpsDaemon) listen(pipeDir string) (net.Listener, error) {
	if err := os.MkdirAll(pipeDir, 0o755); err != nil {
		return nil, err
	}
	if _, err := mpsCall(pipeDir, "get_server_list", time.Second); err == nil {
		return nil, errors.New("An instance of this daemon is already running")
	}
	sock := filepath.Join(pipeDir, MPSSocket)
	// A socket file left by a daemon that died (a reboot, a kill) is not
	// a daemon.
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l, nil
}

func (d *mpsDaemon) logf(format string, args ...any) {
	fmt.Fprintf(d.log, "[%s] %s\n", time.Now().UTC().Format("2006-01-02 15:04:05.000"), fmt.Sprintf(format, args...))
}

// handle answers one client connection: one command line, the reply, end
// of stream. It reports whether the command was quit.
func (d *mpsDaemon) handle(conn net.Conn) bool {
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && line == "" {
		return false
	}
	d.mu.Lock()
	hang := time.Until(d.hangTill)
	d.mu.Unlock()
	if hang > 0 {
		time.Sleep(hang)
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return false
	}
	d.logf("Accepting connection... %s", strings.Join(fields, " "))
	reply, isQuit := d.command(fields)
	_, _ = io.WriteString(conn, reply)
	return isQuit
}

func (d *mpsDaemon) command(f []string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case f[0] == "quit":
		return "", true
	case f[0] == "get_server_list":
		var out strings.Builder
		for _, uid := range sortedKeys(d.servers) {
			fmt.Fprintf(&out, "%d\n", d.servers[uid])
		}
		return out.String(), false
	case len(f) == 3 && f[0] == "start_server" && f[1] == "-uid":
		uid, err := strconv.Atoi(f[2])
		if err != nil {
			return "invalid uid " + f[2] + "\n", false
		}
		if _, ok := d.servers[uid]; !ok {
			d.servers[uid] = os.Getpid()*100 + len(d.servers) + 1
			d.logf("Starting new server %d for user %d", d.servers[uid], uid)
		}
		return "", false
	case len(f) >= 2 && f[0] == "shutdown_server":
		pid, _ := strconv.Atoi(f[1])
		for uid, p := range d.servers {
			if p == pid {
				delete(d.servers, uid)
			}
		}
		return "", false
	case len(f) == 2 && f[0] == "get_client_list":
		return "", false
	case len(f) == 3 && f[0] == FakeCommand && f[1] == "hang":
		dur, err := time.ParseDuration(f[2])
		if err != nil {
			return err.Error() + "\n", false
		}
		d.hangTill = time.Now().Add(dur)
		return "", false
	}
	return "Unrecognized command: " + strings.Join(f, " ") + "\n", false
}

func sortedKeys(m map[int]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mpsClient sends every line of in to the daemon.
func mpsClient(pipeDir string, in io.Reader, stdout, stderr io.Writer) int {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		reply, err := mpsCall(pipeDir, sc.Text(), 0)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		_, _ = io.WriteString(stdout, reply)
	}
	return 0
}

// mpsCall sends one command and returns the reply; timeout 0 waits as
// long as the daemon takes.
func mpsCall(pipeDir, command string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("unix", filepath.Join(pipeDir, MPSSocket), time.Second)
	if err != nil {
		return "", errNoDaemon
	}
	defer conn.Close()
	if timeout > 0 {
		_ = conn.SetDeadline(time.Now().Add(timeout))
	}
	if _, err := io.WriteString(conn, command+"\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	return string(b), err
}

// watchMPS starts a server for this user and prints the daemon's server
// list every interval, or the error of the call.
func watchMPS(pipeDir string, every time.Duration, out io.Writer) {
	for {
		_, err := mpsCall(pipeDir, fmt.Sprintf("start_server -uid %d", os.Getuid()), 5*time.Second)
		var list string
		if err == nil {
			list, err = mpsCall(pipeDir, "get_server_list", 5*time.Second)
		}
		now := time.Now().UTC().Format(time.RFC3339Nano)
		if err != nil {
			fmt.Fprintf(out, "%s error=%v\n", now, err)
		} else {
			fmt.Fprintf(out, "%s servers=%s\n", now, strings.Join(strings.Fields(list), ","))
		}
		time.Sleep(every)
	}
}
