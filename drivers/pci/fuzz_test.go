package pci

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var kernelBusID = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// writeFunction renders one PCI function under sys: a root complex, a
// root port, depth bridges (the ports of PCIe switches) and the function
// with its numa_node, and the /sys/bus/pci/devices link to it.
func writeFunction(t *testing.T, sys, busID string, depth int, numa []byte) []string {
	t.Helper()
	chain := []string{"pci0000:00", "0000:00:01.0"}
	for i := 0; i < depth; i++ {
		chain = append(chain, fmt.Sprintf("0000:%02x:00.0", 0x10+i))
	}
	chain = append(chain, busID)
	dir := filepath.Join(append([]string{sys, "devices"}, chain...)...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if numa != nil {
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), numa, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := filepath.Join(sys, "bus", "pci", "devices")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(append([]string{"..", "..", "..", "devices"}, chain...)...)
	if err := os.Symlink(target, filepath.Join(links, busID)); err != nil {
		t.Fatal(err)
	}
	return chain
}

// FuzzLookup: a function's topology is found under whatever spelling of
// its address NVML or a tool hands over (upper case, 8-digit domain,
// trailing NULs), and what is read of sysfs is a topology: the root
// complex at the top of its path, the topmost switch port below the root
// port, a NUMA node the kernel can print (-1 for none).
func FuzzLookup(f *testing.F) {
	f.Add(uint8(0x1b), uint8(0), uint8(0), uint8(2), []byte("0\n"), "00000000:1B:00.0\x00")
	f.Add(uint8(0xdf), uint8(0), uint8(1), uint8(0), []byte("-1\n"), "0000:df:00.1")
	f.Add(uint8(0x9a), uint8(3), uint8(7), uint8(1), []byte("1"), "0000:9A:03.7")
	f.Fuzz(func(t *testing.T, bus, dev, fn, depth uint8, numa []byte, spelling string) {
		busID := fmt.Sprintf("0000:%02x:%02x.%x", bus, dev&0x1f, fn&7)
		sys := t.TempDir()
		chain := writeFunction(t, sys, busID, int(depth%4), numa)
		r := NewReader(sys)

		got, err := r.Lookup(busID)
		if err != nil {
			t.Fatalf("lookup of %s: %v", busID, err)
		}
		if got.BusID != busID || got.Root != chain[0] {
			t.Errorf("%s: topology %+v", busID, got)
		}
		if wantSwitch := ""; len(chain) >= 4 {
			wantSwitch = chain[2]
			if got.Switch != wantSwitch {
				t.Errorf("%s: switch %q, want %q", busID, got.Switch, wantSwitch)
			}
		} else if got.Switch != wantSwitch {
			t.Errorf("%s: switch %q off a root port", busID, got.Switch)
		}
		if got.NUMANode < -1 {
			t.Errorf("%s: numa_node %q read as NUMA node %d", busID, numa, got.NUMANode)
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(numa))); err == nil && n >= -1 && got.NUMANode != n {
			t.Errorf("%s: numa_node %q read as %d", busID, numa, got.NUMANode)
		}
		if _, ok := got.Attributes()[AttrNUMANode]; ok != (got.NUMANode >= 0) {
			t.Errorf("%s: NUMA attribute present %v for node %d", busID, ok, got.NUMANode)
		}

		n := Normalize(spelling)
		if Normalize(n) != n {
			t.Errorf("Normalize(%q) = %q is not a fixed point", spelling, n)
		}
		if alt, err := r.Lookup(spelling); err == nil {
			if n != busID || alt != got {
				t.Errorf("lookup of %q found %+v; the tree holds only %s", spelling, alt, busID)
			}
		} else if n == busID {
			t.Errorf("lookup of %q, a spelling of %s: %v", spelling, busID, err)
		}
		for _, s := range []string{strings.ToUpper(busID), "0000" + strings.ToUpper(busID), busID + "\x00\x00"} {
			if Normalize(s) != busID {
				t.Errorf("Normalize(%q) = %q, want %q", s, Normalize(s), busID)
			}
		}
	})
}
