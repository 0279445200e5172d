package hardware

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// openBShapes are the distinct (model, gpu) pairs of the openb node list
// (openb_node_list_gpu_node.csv), written out so that the test needs no
// data file.
var openBShapes = []struct {
	model  string
	gpus   int
	preset string
}{
	{"G2", 8, "openb-g2-x8"},
	{"G3", 8, "openb-g3-x8"},
	{"T4", 2, "openb-t4-x2"},
	{"T4", 4, "openb-t4-x4"},
	{"P100", 1, "openb-p100-x1"},
	{"P100", 2, "openb-p100-x2"},
	{"V100M16", 1, "openb-v100m16-x1"},
	{"V100M16", 4, "openb-v100m16-x4"},
	{"V100M16", 8, "openb-v100m16-x8"},
	{"V100M32", 4, "openb-v100m32-x4"},
	{"V100M32", 8, "openb-v100m32-x8"},
	{"A10", 1, "openb-a10-x1"},
}

func TestOpenBPresetNamesEveryNodeListShape(t *testing.T) {
	for _, s := range openBShapes {
		name, ok := OpenBPreset(s.model, s.gpus)
		if !ok || name != s.preset {
			t.Errorf("OpenBPreset(%q, %d) = %q, %v; want %q", s.model, s.gpus, name, ok, s.preset)
			continue
		}
		m, err := Lookup(name)
		if err != nil {
			t.Errorf("preset of %s x%d: %v", s.model, s.gpus, err)
			continue
		}
		if got := len(m.GPUs()); got != s.gpus {
			t.Errorf("%s has %d GPUs, want %d", name, got, s.gpus)
		}
		if m.GPUModel == "" || len(m.NICs()) != 0 || len(m.NVLinkPartitions) != 0 {
			t.Errorf("%s: GPU model %q, %d NICs, %d NVLink partitions; want a model, no NICs, no partitions",
				name, m.GPUModel, len(m.NICs()), len(m.NVLinkPartitions))
		}
	}
}

func TestOpenBPresetRejectsShapesNotInTheNodeList(t *testing.T) {
	for _, tc := range []struct {
		model string
		gpus  int
	}{
		{"G2", 4},      // G2 nodes all have eight GPUs
		{"G1", 8},      // in the paper, not in the node list
		{"v100m16", 4}, // the node list writes models in upper case
		{"T4", 0},
		{"", 0},
	} {
		if name, ok := OpenBPreset(tc.model, tc.gpus); ok {
			t.Errorf("OpenBPreset(%q, %d) = %q, want none", tc.model, tc.gpus, name)
		}
	}
}

func TestOpenBMachinesAreTheRegisteredOpenBPresets(t *testing.T) {
	var want []string
	for _, s := range openBShapes {
		want = append(want, s.preset)
	}
	var got []string
	for _, m := range OpenBMachines() {
		got = append(got, m.Name)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("OpenBMachines names (-want +got):\n%s", diff)
	}
	var registered []string
	for name := range Machines() {
		if strings.HasPrefix(name, "openb-") {
			registered = append(registered, name)
		}
	}
	slices.Sort(registered)
	slices.Sort(want)
	if diff := cmp.Diff(want, registered); diff != "" {
		t.Errorf("openb presets in Machines() (-want +got):\n%s", diff)
	}
}

// TestOpenBLayouts: GPUs are numbered in order on distinct PCI addresses,
// the first half on NUMA node 0; eight GPUs sit in pairs behind four PCIe
// switches, fewer each on a root port; and the layout renders as sysfs.
func TestOpenBLayouts(t *testing.T) {
	for _, m := range OpenBMachines() {
		t.Run(m.Name, func(t *testing.T) {
			gpus := m.GPUs()
			n := len(gpus)
			seen := map[string]bool{}
			switches := map[string][]int{}
			for i, g := range gpus {
				if g.Index != i {
					t.Errorf("GPU %d has index %d", i, g.Index)
				}
				if seen[g.BusID()] {
					t.Errorf("GPU %d reuses bus id %s", i, g.BusID())
				}
				seen[g.BusID()] = true
				wantNUMA := 0
				if i >= max(n/2, 1) {
					wantNUMA = 1
				}
				if g.NUMANode != wantNUMA {
					t.Errorf("GPU %d on NUMA node %d, want %d", i, g.NUMANode, wantNUMA)
				}
				switch {
				case n == 8 && len(g.Path) == 5:
					switches[g.Path[2]] = append(switches[g.Path[2]], i)
				case n < 8 && len(g.Path) == 3:
				default:
					t.Errorf("GPU %d path %v", i, g.Path)
				}
			}
			if n == 8 {
				for sw, members := range switches {
					if len(members) != 2 || members[1] != members[0]+1 || members[0]%2 != 0 {
						t.Errorf("switch %s holds GPUs %v, want a pair 2k, 2k+1", sw, members)
					}
				}
				if len(switches) != 4 {
					t.Errorf("%d PCIe switches, want 4", len(switches))
				}
			}
			if err := WriteNode(t.TempDir(), m, "boot"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
