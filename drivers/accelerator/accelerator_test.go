package accelerator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/strata-sh/strata/drivers/pci"
)

func values(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[string]any {
	out := map[string]any{}
	for k, a := range attrs {
		switch {
		case a.StringValue != nil:
			out[string(k)] = *a.StringValue
		case a.IntValue != nil:
			out[string(k)] = *a.IntValue
		case a.BoolValue != nil:
			out[string(k)] = *a.BoolValue
		}
	}
	return out
}

func TestAttributes(t *testing.T) {
	topo := pci.Topology{BusID: "0000:1b:00.0", Root: "pci0000:15", Switch: "0000:16:00.0", NUMANode: 0}
	tests := map[string]struct {
		dev  Device
		want map[string]any
	}{
		"whole NPU in an HCCS ring": {
			dev: Device{Type: NPU, Vendor: "huawei", Model: "910B", Whole: true, MemoryBytes: 64 << 30, Topology: topo, OwnPCIFunction: true, Partitions: map[int]string{4: "ring-0"}},
			want: map[string]any{
				"accelerator.strata.sh/type": "npu", "accelerator.strata.sh/vendor": "huawei", "accelerator.strata.sh/model": "910B",
				"accelerator.strata.sh/whole": true, "accelerator.strata.sh/memory": int64(64 << 30),
				"accelerator.strata.sh/numaNode": int64(0), "accelerator.strata.sh/pcieSwitch": "0000:16:00.0",
				"accelerator.strata.sh/partition4": "ring-0",
				"resource.kubernetes.io/pcieRoot":  "pci0000:15", "resource.kubernetes.io/pciBusID": "0000:1b:00.0",
				"resource.kubernetes.io/numaNode": int64(0), "topology.strata.sh/pcieSwitch": "0000:16:00.0",
			},
		},
		// A partition is not a PCI function: no bus id. Without NUMA
		// affinity, no NUMA attributes; without a switch, no switch.
		"partition on a root port without NUMA": {
			dev: Device{Type: GPU, Vendor: "nvidia", Whole: false, Topology: pci.Topology{BusID: "0000:01:00.0", Root: "pci0000:00", NUMANode: -1}},
			want: map[string]any{
				"accelerator.strata.sh/type": "gpu", "accelerator.strata.sh/vendor": "nvidia", "accelerator.strata.sh/whole": false,
				"resource.kubernetes.io/pcieRoot": "pci0000:00",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
			tc.dev.AddAttributes(attrs)
			if diff := cmp.Diff(tc.want, values(attrs)); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
		})
	}
}
