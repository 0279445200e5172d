package schedulerargs

// Default gives a weight of 1 to resources whose weight is 0 or absent.
func (a *NodeResourcesFitPlusArgs) Default() {
	for name, r := range a.Resources {
		if r.Weight == 0 {
			r.Weight = 1
			a.Resources[name] = r
		}
	}
}

// StrataFragmentation defaults.
var (
	DefaultFragmentationClasses    = []string{"nvidia-gpu.strata.sh", "nvidia-shared.strata.sh"}
	DefaultFragmentationMIGClasses = []string{"nvidia-mig.strata.sh"}
)

const (
	DefaultUnreachableWeight int32 = 1000
	DefaultCoveragePercent   int32 = 95
	DefaultHalfLifePods      int32 = 20000
)

// Default fills in the classes, weight, coverage and half-life left out.
func (a *StrataFragmentationArgs) Default() {
	if len(a.DeviceClasses) == 0 {
		a.DeviceClasses = append([]string(nil), DefaultFragmentationClasses...)
	}
	if len(a.MIGDeviceClasses) == 0 {
		a.MIGDeviceClasses = append([]string(nil), DefaultFragmentationMIGClasses...)
	}
	if a.UnreachableWeight == nil {
		w := DefaultUnreachableWeight
		a.UnreachableWeight = &w
	}
	if a.CoveragePercent == 0 {
		a.CoveragePercent = DefaultCoveragePercent
	}
	if a.HalfLifePods == nil {
		h := DefaultHalfLifePods
		a.HalfLifePods = &h
	}
}
