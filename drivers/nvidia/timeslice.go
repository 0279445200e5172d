package nvidia

import (
	"context"
	"slices"
	"strconv"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
	"github.com/strata-sh/strata/internal/vendortool"
)

// TimeSliceControl sets the time slice of a GPU: how long a process runs
// before the GPU's scheduler switches to the next one. NVML has no call
// for it; the driver exposes it through nvidia-smi compute-policy.
type TimeSliceControl interface {
	// SetTimeSlice sets interval n (0 Default, 1 Short, 2 Medium, 3 Long)
	// on the GPU with the given UUID.
	SetTimeSlice(ctx context.Context, gpuUUID string, n int) error
}

// ExecTimeSlice runs "nvidia-smi compute-policy -i <uuid>
// --set-timeslice <n>".
type ExecTimeSlice struct {
	// Binary is nvidia-smi; default "nvidia-smi".
	Binary string
	// LibraryDir is as ExecMPS's.
	LibraryDir string
}

var _ TimeSliceControl = ExecTimeSlice{}

// SetTimeSlice implements TimeSliceControl.
func (e ExecTimeSlice) SetTimeSlice(ctx context.Context, gpuUUID string, n int) error {
	bin := e.Binary
	if bin == "" {
		bin = "nvidia-smi"
	}
	args := []string{"compute-policy", "-i", gpuUUID, "--set-timeslice", strconv.Itoa(n)}
	out, err := vendortool.Exec{Tool: "nvidia-smi", Binary: bin, Env: libraryEnv(e.LibraryDir), Timeout: ToolTimeout}.Run(ctx, args...)
	if err != nil {
		return vendortool.Failed("nvidia-smi", args, out, err)
	}
	return nil
}

// timeSliceUse is how many prepared claims time-slice a GPU, and the
// interval they set.
type timeSliceUse struct {
	claims   int
	interval configv1alpha1.TimeSliceInterval
}

// timeSliceNumber is nvidia-smi's number for an interval.
func timeSliceNumber(iv configv1alpha1.TimeSliceInterval) int {
	return max(slices.Index(configv1alpha1.TimeSliceIntervals, iv), 0)
}
