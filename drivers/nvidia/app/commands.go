package app

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/hardware/nvmlmock"
)

// The binary's commands besides the plugin itself.
const (
	// MPSDaemonCommand runs one GPU's MPS control daemon in the
	// foreground: the container of an MPS daemon pod. With --probe it is
	// that container's liveness probe instead.
	MPSDaemonCommand = "mps-daemon"
	// SimulatedMPSControlCommand is the stand-in for
	// nvidia-cuda-mps-control on a simulated machine (--simulate).
	SimulatedMPSControlCommand = "simulated-mps-control"
)

// Command runs the binary's command name with args, if it is one, and
// returns its exit code.
func Command(name string, args []string) (code int, ok bool) {
	switch name {
	case MPSDaemonCommand:
		return mpsDaemonMain(args), true
	case SimulatedMPSControlCommand:
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		return nvmlmock.MPSControlMain([]string{self, SimulatedMPSControlCommand}, args, os.Stdin, os.Stdout, os.Stderr), true
	}
	return 0, false
}

func mpsDaemonMain(args []string) int {
	fs := flag.NewFlagSet(MPSDaemonCommand, flag.ContinueOnError)
	var d nvidia.MPSDaemon
	fs.StringVar(&d.GPU, "gpu-uuid", "", "UUID of the GPU the daemon serves")
	fs.StringVar(&d.Dir, "dir", "", "the daemon's folder: pipe directory dir/pipe, logs in dir/log")
	libraryDir := fs.String("library-dir", "", "the driver's library folder, put on the loader's path")
	probe := fs.Bool("probe", false, "check that the daemon answers instead of running it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	command := fs.Args()
	if d.GPU == "" || d.Dir == "" || len(command) == 0 {
		fmt.Fprintln(os.Stderr, "usage: mps-daemon [--probe] --gpu-uuid=UUID --dir=DIR [--library-dir=DIR] -- CONTROL-PROGRAM [ARGS]")
		return 2
	}
	if *probe {
		if err := nvidia.ProbeMPSDaemon(context.Background(), d, command, *libraryDir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	err := nvidia.RunMPSDaemon(d, command, *libraryDir)
	fmt.Fprintln(os.Stderr, err)
	return 1
}
