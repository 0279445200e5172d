package nvidia

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
	"github.com/strata-sh/strata/drivers/plugin"
)

// FuzzReadDevNumbers: /proc/devices and the driver's MIG capability
// table. Numbers that read are ones the kernel can have: majors of 12
// bits, minors of 20, none negative.
func FuzzReadDevNumbers(f *testing.F) {
	var mig strings.Builder
	mig.WriteString("config 1\nmonitor 2\n")
	for gi, minor := 0, 3; gi < 3; gi++ {
		fmt.Fprintf(&mig, "gpu0/gi%d/access %d\ngpu0/gi%d/ci0/access %d\n", gi, minor, gi, minor+1)
		minor += 2
	}
	f.Add([]byte("Character devices:\n  1 mem\n195 nvidia-frontend\n234 nvidia-uvm\n237 nvidia-caps\n\nBlock devices:\n  8 sd\n"), []byte(mig.String()))
	f.Add([]byte("Character devices:\n195 nvidia\n510 nvidia-uvm\n"), []byte(""))
	f.Fuzz(func(t *testing.T, procDevices, migMinors []byte) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "devices"), procDevices, 0o600); err != nil {
			t.Fatal(err)
		}
		// Without the MIG table: readMIGMinors keeps every table it read
		// for the life of the process, which a fuzzer must not grow.
		if d, err := readDevNumbers(root); err == nil {
			if d.nvidia <= 0 || d.uvm <= 0 {
				t.Errorf("device numbers %+v read without nvidia and nvidia-uvm", d)
			}
			for _, n := range []int64{d.nvidia, d.uvm, d.caps} {
				if n < 0 || n > 4095 {
					t.Errorf("device numbers %+v: %d is no device major", d, n)
				}
			}
		}
		for path, minor := range parseMIGMinors(migMinors) {
			if path == "" || strings.ContainsAny(path, " \t\n") {
				t.Errorf("MIG capability %q", path)
			}
			if minor < 0 || minor >= 1<<20 {
				t.Errorf("MIG capability %s: %d is no device minor", path, minor)
			}
		}
	})
}

// spanMembers reads a partition id back into the GPU indexes it names.
func spanMembers(id string) ([]int, bool) {
	if a, b, ok := strings.Cut(id, "-"); ok {
		lo, err1 := strconv.Atoi(a)
		hi, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || hi < lo {
			return nil, false
		}
		var out []int
		for i := lo; i <= hi; i++ {
			out = append(out, i)
		}
		return out, true
	}
	var out []int
	for _, p := range strings.Split(id, "_") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

// FuzzReadPartitions: the fabric manager's partition list. Partition ids
// are what claims match on, so for each size an id is carried by exactly
// the GPUs it names, as many as the size says.
func FuzzReadPartitions(f *testing.F) {
	index := map[string]int{}
	var busIDs []string
	for i, bus := range []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb} {
		b := fmt.Sprintf("0000:%02x:00.0", bus)
		index[b] = i
		busIDs = append(busIDs, b)
	}
	partition := func(id int, members ...int) string {
		var gpus []string
		for _, m := range members {
			gpus = append(gpus, fmt.Sprintf(`{"physicalId":%d,"pciBusId":"%s","numEnabledLinks":18,"maxNumLinks":18}`, m+1, strings.ToUpper("0000"+busIDs[m])))
		}
		return fmt.Sprintf(`{"partitionId":%d,"isActive":0,"numGpus":%d,"gpuInfo":[%s]}`, id, len(members), strings.Join(gpus, ","))
	}
	parts := []string{partition(0, 0, 1, 2, 3, 4, 5, 6, 7), partition(1, 0, 1, 2, 3), partition(2, 4, 5, 6, 7),
		partition(3, 0, 1), partition(4, 2, 3), partition(5, 4, 6), partition(6, 7)}
	f.Add([]byte(`{"numPartitions":7,"maxNumPartitions":31,"partitionInfo":[` + strings.Join(parts, ",") + `]}`))
	f.Add([]byte(`{"partitionInfo":[]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(t.TempDir(), "partitions.json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := readPartitions(path, index)
		if err != nil {
			return
		}
		// size -> id -> GPU indexes carrying it
		carriers := map[int]map[string][]int{}
		for bus, bySize := range out {
			idx, ok := index[bus]
			if !ok {
				t.Errorf("partition of GPU %s, which NVML does not report", bus)
				continue
			}
			for size, id := range bySize {
				if size < 2 {
					t.Errorf("GPU %s: partition %q of size %d", bus, id, size)
				}
				if carriers[size] == nil {
					carriers[size] = map[string][]int{}
				}
				carriers[size][id] = append(carriers[size][id], idx)
			}
		}
		for size, ids := range carriers {
			for id, gpus := range ids {
				slices.Sort(gpus)
				named, ok := spanMembers(id)
				slices.Sort(named)
				if !ok || len(gpus) != size || !slices.Equal(named, gpus) {
					t.Errorf("partition id %q of size %d is carried by GPUs %v", id, size, gpus)
				}
			}
		}
	})
}

// FuzzDeviceState: the backend's state of a prepared device, as read
// back from the checkpoint. stateOf never fails the release; state the
// backend would write reads back as it was written.
func FuzzDeviceState(f *testing.F) {
	for _, st := range []deviceState{
		{Kind: kindMIG, GPUInstance: ptr.To[uint32](3), ComputeInstance: ptr.To[uint32](0), Created: true},
		{Kind: kindGPU, Strategy: string(strategyTimeSlicing), TimeSlice: string(configv1alpha1.TimeSliceLong)},
		{},
	} {
		raw, _ := json.Marshal(st)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		st := stateOf(plugin.PreparedDevice{State: raw})
		again, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("state %+v does not encode: %v", st, err)
		}
		if got := stateOf(plugin.PreparedDevice{State: again}); !cmp.Equal(st, got) {
			t.Errorf("state %+v reads back as %+v", st, got)
		}
	})
}

// FuzzGpuConfigHandler: configs that decode merge into a config that is
// valid on its own, whatever the class and the claim each said, and the
// merge leaves the decoded configs alone (the core decodes once and
// hands the same values to every device).
func FuzzGpuConfigHandler(f *testing.F) {
	const head = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig"`
	f.Add([]byte(head+`,"sharing":{"strategy":"HAMiCore","computeShare":"Unlimited","hamiCore":{"coreLimit":50,"memoryLimit":"20Gi"}}}`),
		[]byte(head+`,"sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`))
	f.Add([]byte(head+`,"sharing":{"strategy":"MPS","mps":{"activeThreadPercentage":25,"pinnedMemoryLimit":"4Gi"}}}`), []byte(head+`}`))
	f.Fuzz(func(t *testing.T, class, claim []byte) {
		h := configHandler{}
		a, errA := h.Decode(class)
		b, errB := h.Decode(claim)
		if errA != nil || errB != nil {
			return
		}
		ca, cb := a.(*configv1alpha1.GpuConfig).DeepCopy(), b.(*configv1alpha1.GpuConfig).DeepCopy()
		merged, err := h.Effective([]any{a, b})
		if err != nil {
			t.Fatalf("merge of two valid configs: %v", err)
		}
		if errs := merged.(*configv1alpha1.GpuConfig).Validate(); len(errs) > 0 {
			t.Errorf("merge of two valid configs is invalid: %v", errs.ToAggregate())
		}
		if !cmp.Equal(ca, a) || !cmp.Equal(cb, b) {
			t.Errorf("Effective changed the decoded configs")
		}
	})
}
