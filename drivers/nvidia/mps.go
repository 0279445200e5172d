package nvidia

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/strata-sh/strata/internal/vendortool"
)

// MPSDaemon is the CUDA MPS control daemon of one GPU: its pipe
// directory (where clients find it) is Dir/pipe, its logs go to Dir/log.
type MPSDaemon struct {
	GPU string // UUID
	Dir string
}

// MPSDir is the folder of the daemon of a GPU under a state directory:
// named by the UUID's first eight hex digits, so that the paths of the
// daemon's sockets stay within the 108 bytes a Unix socket path may have.
// The UUID itself is in its gpu file.
func MPSDir(stateDir, gpuUUID string) string {
	id := strings.ToLower(gpuUUID)
	if i := strings.IndexByte(id, '-'); i >= 0 {
		id = id[i+1:]
	}
	id = strings.ReplaceAll(id, "-", "")
	if len(id) > 8 {
		id = id[:8]
	}
	if id == "" || strings.ContainsAny(id, "/.") {
		id = "gpu"
	}
	return filepath.Join(stateDir, "mps", id)
}

// mpsUUIDFile names the GPU of a daemon folder.
const mpsUUIDFile = "gpu"

// PipeDir is where the daemon's clients find it.
func (d MPSDaemon) PipeDir() string { return filepath.Join(d.Dir, "pipe") }

// LogDir is where the daemon writes control.log.
func (d MPSDaemon) LogDir() string { return filepath.Join(d.Dir, "log") }

// MPSControl runs the MPS control daemons of the node's GPUs
// (nvidia-cuda-mps-control), one per GPU serving all its MPS claims, each
// with its pipe directory at dir/pipe and its logs in dir/log. Whether a
// daemon runs is judged by talking to it, never by the files it leaves,
// and every call is bounded.
type MPSControl interface {
	// Ensure makes the daemon of a GPU answer: one that answers is kept,
	// one that does not is started (again).
	Ensure(ctx context.Context, gpuUUID, dir string) error
	// Stop asks the daemon of a GPU to quit if it answers and removes what
	// it left. A daemon that does not answer is not waited for.
	Stop(ctx context.Context, gpuUUID, dir string) error
	// List reports every daemon the control finds on the node, running or
	// left behind, by GPU UUID, and whether it answers.
	List(ctx context.Context) (map[string]bool, error)
}

// Bounds of MPS calls: one command to a daemon, and a daemon's start
// until it answers.
var (
	MPSCallTimeout  = 5 * time.Second
	MPSStartTimeout = 40 * time.Second
)

// ExecMPS runs nvidia-cuda-mps-control -d, so the daemons live in the
// plugin's process tree: right for a plugin that runs on the host, not
// for one in a container (a restart of the container ends every daemon;
// PodMPS is for that).
type ExecMPS struct {
	// Command is the control program and any leading arguments; default
	// nvidia-cuda-mps-control.
	Command []string
	// StateDir is the backend's state directory: daemons are under
	// StateDir/mps/<uuid>.
	StateDir string
	// LibraryDir, if set, is where the driver's libraries are (the
	// directory of the NVML library the plugin loaded): the program finds
	// them there, as it would on the host.
	LibraryDir string
}

var _ MPSControl = ExecMPS{}

func (e ExecMPS) command() []string {
	if len(e.Command) == 0 {
		return []string{"nvidia-cuda-mps-control"}
	}
	return e.Command
}

// call sends one command to the daemon whose pipe directory is pipeDir,
// as a client: "nvidia-cuda-mps-control" with the command on its input,
// MPSCallTimeout at most.
func (e ExecMPS) call(ctx context.Context, pipeDir, command string) (string, error) {
	out, err := e.run(ctx, MPSCallTimeout, command+"\n", []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipeDir})
	if err != nil {
		return "", fmt.Errorf("%s: %w", command, err)
	}
	return string(out), nil
}

// run runs the control program with input and the extra environment env,
// bounded by timeout (internal/vendortool: its own process group, killed
// whole at the deadline).
func (e ExecMPS) run(ctx context.Context, timeout time.Duration, input string, env []string, args ...string) ([]byte, error) {
	c := e.command()
	return vendortool.Exec{
		Tool: filepath.Base(c[0]), Binary: c[0], Env: append(libraryEnv(e.LibraryDir), env...),
		Input: input, Timeout: timeout,
	}.Run(ctx, append(c[1:len(c):len(c)], args...)...)
}

// answers reports whether the daemon of d answers a harmless query.
func (e ExecMPS) answers(ctx context.Context, d MPSDaemon) error {
	if _, err := os.Stat(d.PipeDir()); err != nil {
		return err
	}
	_, err := e.call(ctx, d.PipeDir(), "get_server_list")
	return err
}

// Ensure implements MPSControl.
func (e ExecMPS) Ensure(ctx context.Context, gpuUUID, dir string) error {
	d := MPSDaemon{GPU: gpuUUID, Dir: dir}
	if e.answers(ctx, d) == nil {
		return nil
	}
	// What a daemon that died left (a reboot, a kill) is not a daemon.
	if err := os.RemoveAll(d.PipeDir()); err != nil {
		return err
	}
	if err := writeMPSDir(d); err != nil {
		return err
	}
	env := []string{"CUDA_VISIBLE_DEVICES=" + d.GPU, "CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir(), "CUDA_MPS_LOG_DIRECTORY=" + d.LogDir()}
	if out, err := e.run(ctx, ToolTimeout, "", env, "-d"); err != nil {
		return vendortool.Failed(filepath.Base(e.command()[0]), []string{"-d"}, out, err)
	}
	return waitAnswer(ctx, d, e.answers, func() string { return "" })
}

// writeMPSDir makes the daemon's folders and names its GPU there.
func writeMPSDir(d MPSDaemon) error {
	for _, dir := range []string{d.PipeDir(), d.LogDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(d.Dir, mpsUUIDFile), []byte(d.GPU+"\n"), 0o644)
}

// waitAnswer polls the daemon of d until it answers, for MPSStartTimeout
// at most; the error says what status() tells about it.
func waitAnswer(ctx context.Context, d MPSDaemon, answers func(context.Context, MPSDaemon) error, status func() string) error {
	ctx, cancel := context.WithTimeout(ctx, MPSStartTimeout)
	defer cancel()
	var last error
	for {
		if last = answers(ctx, d); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the MPS control daemon of GPU %s does not answer after %s%s: %w", d.GPU, MPSStartTimeout, status(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop implements MPSControl.
func (e ExecMPS) Stop(ctx context.Context, gpuUUID, dir string) error {
	d := MPSDaemon{GPU: gpuUUID, Dir: dir}
	if e.answers(ctx, d) == nil {
		if _, err := e.call(ctx, d.PipeDir(), "quit"); err != nil {
			return err
		}
	}
	return os.RemoveAll(d.PipeDir())
}

// List implements MPSControl: the daemons that left a pipe directory.
func (e ExecMPS) List(ctx context.Context) (map[string]bool, error) {
	dirs, err := filepath.Glob(filepath.Join(e.StateDir, "mps", "*", "pipe"))
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(dirs))
	for _, p := range dirs {
		d := MPSDaemon{GPU: filepath.Base(filepath.Dir(p)), Dir: filepath.Dir(p)}
		if b, err := os.ReadFile(filepath.Join(d.Dir, mpsUUIDFile)); err == nil && strings.TrimSpace(string(b)) != "" {
			d.GPU = strings.TrimSpace(string(b))
		}
		out[d.GPU] = e.answers(ctx, d) == nil
	}
	return out, nil
}

// RunMPSDaemon is the body of an MPS daemon pod's container: it becomes
// the control program in the foreground ("-f"), for the GPU and
// directories of d, with the driver's libraries in libraryDir.
func RunMPSDaemon(d MPSDaemon, command []string, libraryDir string) error {
	if err := writeMPSDir(d); err != nil {
		return err
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return err
	}
	env := toolEnv(libraryDir, "CUDA_VISIBLE_DEVICES="+d.GPU, "CUDA_MPS_PIPE_DIRECTORY="+d.PipeDir(), "CUDA_MPS_LOG_DIRECTORY="+d.LogDir())
	return syscall.Exec(path, append(append([]string{command[0]}, command[1:]...), "-f"), env)
}

// ProbeMPSDaemon is an MPS daemon pod's liveness probe: the daemon of d
// answers a query.
func ProbeMPSDaemon(ctx context.Context, d MPSDaemon, command []string, libraryDir string) error {
	return ExecMPS{Command: command, LibraryDir: libraryDir}.answers(ctx, d)
}

// ToolTimeout bounds every run of an NVIDIA program (nvidia-smi,
// nvidia-cuda-mps-control starting a daemon): a wedged one fails the call
// instead of hanging the plugin with its lock held.
var ToolTimeout = 30 * time.Second

// libraryEnv puts the driver's library directory first on the loader's
// path of an NVIDIA program (the program is the host's, its libraries are
// under the driver root, not in the plugin's image); nil if unknown.
func libraryEnv(libraryDir string) []string {
	if libraryDir == "" {
		return nil
	}
	path := libraryDir
	if v := os.Getenv("LD_LIBRARY_PATH"); v != "" {
		path += ":" + v
	}
	return []string{"LD_LIBRARY_PATH=" + path}
}

// toolEnv is the whole environment of an NVIDIA program run without
// internal/vendortool: the plugin's, the driver's libraries (libraryEnv)
// and extra.
func toolEnv(libraryDir string, extra ...string) []string {
	env := os.Environ()
	if lib := libraryEnv(libraryDir); lib != nil {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "LD_LIBRARY_PATH=") })
		env = append(env, lib...)
	}
	return append(env, extra...)
}
