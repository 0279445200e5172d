package nvmlmock

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mpsControlArg makes this test binary the stand-in program.
const mpsControlArg = "strata-test-mps-control"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == mpsControlArg {
		os.Exit(MPSControlMain([]string{os.Args[0], mpsControlArg}, os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// mpsControl runs the stand-in with input in, for the daemon in dir.
func mpsControl(t *testing.T, dir, in string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{mpsControlArg}, args...)...)
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+filepath.Join(dir, "pipe"), "CUDA_MPS_LOG_DIRECTORY="+filepath.Join(dir, "log"))
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// daemonPID reads the PID the daemon logged last.
func daemonPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log", "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Control daemon started, pid (\d+)`).FindAllStringSubmatch(string(b), -1)
	if len(m) == 0 {
		t.Fatalf("no daemon start in control.log:\n%s", b)
	}
	pid, _ := strconv.Atoi(m[len(m)-1][1])
	return pid
}

// TestMPSControlStandIn: -d leaves a daemon that clients talk to; a
// killed daemon leaves its socket file but answers nobody, and a new
// daemon starts over it; quit ends it.
func TestMPSControlStandIn(t *testing.T) {
	dir := t.TempDir()
	if out, err := mpsControl(t, dir, "get_server_list\n"); err == nil || !strings.Contains(out, "Cannot find MPS control daemon") {
		t.Fatalf("client without a daemon: %v %q", err, out)
	}
	if out, err := mpsControl(t, dir, "", "-d"); err != nil {
		t.Fatalf("-d: %v %s", err, out)
	}
	pid := daemonPID(t, dir)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if out, err := mpsControl(t, dir, "", "-d"); err == nil {
		t.Errorf("a second daemon on one pipe directory started: %s", out)
	}
	if out, err := mpsControl(t, dir, "start_server -uid 1000\nget_server_list\n"); err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("server list after start_server: %v %q", err, out)
	}

	// Killed: the socket stays, nobody answers.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if _, err := os.Stat(filepath.Join(dir, "pipe", MPSSocket)); err != nil {
		t.Fatalf("a killed daemon's socket file: %v", err)
	}
	if out, err := mpsControl(t, dir, "get_server_list\n"); err == nil {
		t.Errorf("a killed daemon answered: %q", out)
	}
	if out, err := mpsControl(t, dir, "", "-d"); err != nil {
		t.Fatalf("-d over a dead daemon's files: %v %s", err, out)
	}
	second := daemonPID(t, dir)
	t.Cleanup(func() { _ = syscall.Kill(second, syscall.SIGKILL) })
	if second == pid {
		t.Fatalf("the new daemon has the old one's PID %d", pid)
	}
	if out, err := mpsControl(t, dir, "get_server_list\n"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("a new daemon's servers: %v %q, want none", err, out)
	}
	if out, err := mpsControl(t, dir, "quit\n"); err != nil {
		t.Fatalf("quit: %v %s", err, out)
	}
	waitGone(t, second)
}

// TestMPSControlHang: a wedged daemon keeps clients waiting; a client
// with a deadline gets none.
func TestMPSControlHang(t *testing.T) {
	dir := t.TempDir()
	if out, err := mpsControl(t, dir, "", "-d"); err != nil {
		t.Fatalf("-d: %v %s", err, out)
	}
	pid := daemonPID(t, dir)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if out, err := mpsControl(t, dir, FakeCommand+" hang 1h\n"); err != nil {
		t.Fatalf("hang: %v %s", err, out)
	}
	if _, err := mpsCall(filepath.Join(dir, "pipe"), "get_server_list", 300*time.Millisecond); err == nil {
		t.Error("a wedged daemon answered")
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// The daemon is its own session's leader, not our child: signal 0
		// says whether it is there (a zombie counts until reaped by init).
		if err := syscall.Kill(pid, 0); err != nil {
			return
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still runs", pid)
}
