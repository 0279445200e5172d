package nvidia

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/hardware"
)

// TestDiscoverOpenBPresets: the backend publishes every GPU of each openb
// trace preset as one whole, shareable GPU with the board's product name,
// architecture, compute capability and memory, and no MIG devices or
// counters, since none of the models has MIG.
func TestDiscoverOpenBPresets(t *testing.T) {
	want := map[string]struct {
		product, model, arch string
		memory               string
		cc                   string
	}{
		"G2":      {"Alibaba G2", "G2", "Unknown", "16Gi", "0.0.0"},
		"G3":      {"Alibaba G3", "G3", "Unknown", "32Gi", "0.0.0"},
		"T4":      {"Tesla T4", "T4", "Turing", "15360Mi", "7.5.0"},
		"P100":    {"Tesla P100-PCIE-16GB", "P100", "Pascal", "16280Mi", "6.0.0"},
		"V100M16": {"Tesla V100-SXM2-16GB", "V100", "Volta", "16160Mi", "7.0.0"},
		"V100M32": {"Tesla V100-SXM2-32GB", "V100", "Volta", "32510Mi", "7.0.0"},
		"A10":     {"NVIDIA A10", "A10", "Ampere", "23028Mi", "8.6.0"},
	}
	shapes := 0
	for trace, w := range want {
		for _, n := range []int{1, 2, 4, 8} {
			name, ok := hardware.OpenBPreset(trace, n)
			if !ok {
				continue
			}
			shapes++
			t.Run(name, func(t *testing.T) {
				m, err := hardware.Lookup(name)
				if err != nil {
					t.Fatal(err)
				}
				_, ctx := ktesting.NewTestContext(t)
				b, _, _ := newBackend(t, m)
				inv, err := b.Discover(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(inv.Devices) != n || len(inv.SharedCounters) != 0 {
					t.Fatalf("%d devices and %d counter sets, want %d GPUs and none", len(inv.Devices), len(inv.SharedCounters), n)
				}
				layout := m.GPUs()
				for i, dev := range inv.Devices {
					checkString(t, dev, "type", "gpu")
					checkString(t, dev, "productName", w.product)
					checkString(t, dev, "architecture", w.arch)
					checkString(t, dev, "accelerator.strata.sh/model", w.model)
					checkString(t, dev, "resource.kubernetes.io/pciBusID", layout[i].BusID())
					if got := *dev.Attributes["cudaComputeCapability"].VersionValue; got != w.cc {
						t.Errorf("%s compute capability %s, want %s", dev.Name, got, w.cc)
					}
					if got := dev.Capacity["memory"].Value; got.Cmp(resource.MustParse(w.memory)) != 0 {
						t.Errorf("%s memory %s, want %s", dev.Name, got.String(), w.memory)
					}
					_, switched := dev.Attributes["accelerator.strata.sh/pcieSwitch"]
					if switched != (n == 8) {
						t.Errorf("%s has a PCIe switch attribute: %v, want %v", dev.Name, switched, n == 8)
					}
				}
			})
		}
	}
	if shapes != 12 {
		t.Errorf("%d openb shapes discovered, want the node list's 12", shapes)
	}
}
