package pci

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-sh/strata/hardware"
)

func TestLookupOnDGXLayouts(t *testing.T) {
	for _, m := range []hardware.Machine{hardware.DGXH100(), hardware.DGXA100()} {
		root := t.TempDir()
		if err := hardware.WriteNode(root, m, "boot"); err != nil {
			t.Fatal(err)
		}
		r := NewReader(filepath.Join(root, "sys"))
		for _, f := range m.Functions {
			got, err := r.Lookup(f.BusID())
			if err != nil {
				t.Fatalf("%s %s: %v", m.Name, f.BusID(), err)
			}
			want := Topology{BusID: f.BusID(), Root: f.Root(), Switch: f.Path[2], NUMANode: f.NUMANode}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", m.Name, f.BusID(), diff)
			}
		}
		// A GPU and its rail NIC share a switch.
		gpu, _ := r.Lookup(m.GPUs()[0].BusID())
		nic, _ := r.Lookup(m.NICs()[0].BusID())
		if gpu.Switch != nic.Switch {
			t.Errorf("%s: GPU 0 switch %s, NIC 0 switch %s", m.Name, gpu.Switch, nic.Switch)
		}
	}
}

func TestLookupUnknownDevice(t *testing.T) {
	r := NewReader(t.TempDir())
	if _, err := r.Lookup("0000:99:00.0"); err == nil {
		t.Error("lookup of a missing device succeeded")
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:1B:00.0":     "0000:1b:00.0",
		"0000:1b:00.0":         "0000:1b:00.0",
		"00000000:DF:00.0\x00": "0000:df:00.0",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}
