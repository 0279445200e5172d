package nvmlmock

import (
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/strata-sh/strata/hardware"
)

// TestStateSurvivesARestart: what a plugin did to the GPUs (MIG mode,
// instances with their ids, compute mode) is reported to OnChange as it
// happens, and a new server restored from it answers as the old one did:
// the instances are there under their ids and can be destroyed.
func TestStateSurvivesARestart(t *testing.T) {
	m := hardware.DGXA100()
	s, err := New(m, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	var saved State
	changes := 0
	s.OnChange(func(st State) { saved, changes = st, changes+1 })
	if err := s.ApplyMIGConfig(2, map[string]int{"3g.20gb": 1, "1g.5gb": 2}); err != nil {
		t.Fatal(err)
	}
	if ret := s.Device(1).SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if changes == 0 || !reflect.DeepEqual(saved, s.State()) {
		t.Fatalf("after %d changes the saved state differs from the server's:\n%+v\n%+v", changes, saved, s.State())
	}
	// A compute instance destroyed through its GPU instance is a change too.
	gis := saved.GPUs[2].Instances
	if len(gis) != 3 {
		t.Fatalf("GPU 2 instances %+v, want 3", gis)
	}
	gi, ret := s.Device(2).GetGpuInstanceById(int(gis[1].ID))
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	var ci *server.ComputeInstance
	for c := range gi.(*server.GpuInstance).ComputeInstances {
		ci = c
	}
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if len(saved.GPUs[2].Instances[1].Compute) != 0 {
		t.Fatalf("a destroyed compute instance is still in the saved state: %+v", saved.GPUs[2].Instances[1])
	}

	restarted, err := New(m, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	restarted.Restore(saved)
	if !reflect.DeepEqual(restarted.State(), saved) {
		t.Fatalf("restored state differs:\n%+v\n%+v", restarted.State(), saved)
	}
	if mode := restarted.ComputeMode(1); mode != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode of GPU 1 after restore: %v", mode)
	}
	gi, ret = restarted.Device(2).GetGpuInstanceById(int(gis[0].ID))
	if ret != nvml.SUCCESS {
		t.Fatalf("instance %d after restore: %v", gis[0].ID, ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	// A new instance does not take a restored one's id.
	info, ret := restarted.Device(2).GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	placements, ret := restarted.Device(2).GetGpuInstancePossiblePlacements(&info)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	var made nvml.GpuInstance
	for _, p := range placements {
		if made, ret = restarted.Device(2).CreateGpuInstanceWithPlacement(&info, &p); ret == nvml.SUCCESS {
			break
		}
	}
	if made == nil {
		t.Fatal("no free 1g placement after restore")
	}
	got, _ := made.GetInfo()
	for _, in := range restarted.State().GPUs[2].Instances {
		if in.ID == got.Id && in.Start != got.Placement.Start {
			t.Errorf("two instances with id %d", got.Id)
		}
	}
}
