package hardware

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// resolve follows every symlink of path below the tree.
func resolve(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Errorf("resolve %s: %v", path, err)
		return ""
	}
	return p
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read: %v", err)
		return ""
	}
	return strings.TrimSpace(string(raw))
}

func TestWriteNodeRDMATree(t *testing.T) {
	for _, m := range []Machine{DGXH100(), DGXA100(), HGXH100CPUNICs()} {
		t.Run(m.Name, func(t *testing.T) {
			root := t.TempDir()
			if err := WriteNode(root, m, "boot"); err != nil {
				t.Fatal(err)
			}
			sys := resolve(t, filepath.Join(root, SysDir))
			devs := m.RDMADevices()
			fnDir := func(d RDMADevice) string {
				return filepath.Join(append([]string{sys, "devices"}, d.Path...)...)
			}
			vfsOf := map[string][]RDMADevice{}
			byBus := map[string]RDMADevice{}
			names := map[string]bool{}
			for _, d := range devs {
				if names[d.Name] {
					t.Errorf("RDMA device %s twice", d.Name)
				}
				names[d.Name] = true
				byBus[d.BusID] = d
				if d.PF != "" {
					vfsOf[d.PF] = append(vfsOf[d.PF], d)
				}
			}
			if len(vfsOf) != len(m.NICs()) {
				t.Errorf("%d PFs have VFs, want every one of the %d NICs", len(vfsOf), len(m.NICs()))
			}

			for _, d := range devs {
				dir := fnDir(d)
				// class/infiniband/<name> resolves below the PCI
				// function, as the kernel links it.
				ib := resolve(t, filepath.Join(sys, "class", "infiniband", d.Name))
				if want := filepath.Join(dir, "infiniband", d.Name); ib != want {
					t.Errorf("class/infiniband/%s -> %s, want %s", d.Name, ib, want)
				}
				if got := filepath.Base(filepath.Dir(filepath.Dir(ib))); got != d.BusID {
					t.Errorf("class/infiniband/%s is below %s, want the function %s", d.Name, got, d.BusID)
				}
				if got := resolve(t, filepath.Join(sys, "bus", "pci", "devices", d.BusID)); got != dir {
					t.Errorf("bus/pci/devices/%s -> %s, want %s", d.BusID, got, dir)
				}
				if got := resolve(t, filepath.Join(sys, "class", "net", d.NetDev)); got != filepath.Join(dir, "net", d.NetDev) {
					t.Errorf("class/net/%s -> %s", d.NetDev, got)
				}
				if got := readTrimmed(t, filepath.Join(ib, "ports", "1", "state")); got != "4: ACTIVE" {
					t.Errorf("%s port state %q", d.Name, got)
				}
				if got := readTrimmed(t, filepath.Join(ib, "ports", "1", "link_layer")); got != d.NIC.LinkLayer {
					t.Errorf("%s link layer %q, want %s", d.Name, got, d.NIC.LinkLayer)
				}
				if got, want := readTrimmed(t, filepath.Join(ib, "ports", "1", "rate")), fmt.Sprintf("%d Gb/sec", d.NIC.RateGbps); !strings.HasPrefix(got, want) {
					t.Errorf("%s rate %q, want %s", d.Name, got, want)
				}
				verbs := filepath.Join(dir, "infiniband_verbs", fmt.Sprintf("uverbs%d", d.Number))
				if got := readTrimmed(t, filepath.Join(verbs, "ibdev")); got != d.Name {
					t.Errorf("uverbs%d ibdev %q, want %s", d.Number, got, d.Name)
				}
				if got, want := readTrimmed(t, filepath.Join(verbs, "dev")), fmt.Sprintf("%d:%d", InfiniBandMajor, UverbsBase+d.Number); got != want {
					t.Errorf("uverbs%d dev %q, want %s", d.Number, got, want)
				}
				mad := filepath.Join(dir, "infiniband_mad", fmt.Sprintf("umad%d", d.Number))
				if d.NIC.LinkLayer == LinkInfiniBand {
					if got, want := readTrimmed(t, filepath.Join(mad, "dev")), fmt.Sprintf("%d:%d", InfiniBandMajor, d.Number); got != want {
						t.Errorf("umad%d dev %q, want %s", d.Number, got, want)
					}
				} else if _, err := os.Stat(mad); err == nil {
					t.Errorf("Ethernet device %s has umad%d", d.Name, d.Number)
				}

				if d.PF == "" {
					if _, err := os.Lstat(filepath.Join(dir, "physfn")); err == nil {
						t.Errorf("PF %s has a physfn link", d.BusID)
					}
					vfs := vfsOf[d.BusID]
					if got := readTrimmed(t, filepath.Join(dir, "sriov_numvfs")); got != strconv.Itoa(len(vfs)) || len(vfs) != d.NIC.NumVFs {
						t.Errorf("PF %s sriov_numvfs %q, RDMADevices lists %d VFs, NIC enables %d", d.BusID, got, len(vfs), d.NIC.NumVFs)
					}
					if got := readTrimmed(t, filepath.Join(dir, "sriov_totalvfs")); got != strconv.Itoa(d.NIC.TotalVFs) {
						t.Errorf("PF %s sriov_totalvfs %q, want %d", d.BusID, got, d.NIC.TotalVFs)
					}
					links, _ := filepath.Glob(filepath.Join(dir, "virtfn*"))
					if len(links) != len(vfs) {
						t.Errorf("PF %s has %d virtfn links, want %d", d.BusID, len(links), len(vfs))
					}
					for _, l := range links {
						k, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(l), "virtfn"))
						if err != nil {
							t.Errorf("bad link %s", l)
							continue
						}
						vfDir := resolve(t, l)
						vf, ok := byBus[filepath.Base(vfDir)]
						if !ok || vf.PF != d.BusID || vf.VFIndex != k {
							t.Errorf("%s/virtfn%d -> %s, which is not VF %d of %s", d.BusID, k, vfDir, k, d.BusID)
							continue
						}
						// ... and the VF's physfn points back.
						if back := resolve(t, filepath.Join(vfDir, "physfn")); back != dir {
							t.Errorf("%s/physfn -> %s, want %s", vf.BusID, back, dir)
						}
					}
				} else {
					if got := resolve(t, filepath.Join(dir, "physfn")); filepath.Base(got) != d.PF || got != fnDir(byBus[d.PF]) {
						t.Errorf("VF %s physfn -> %s, want its PF %s", d.BusID, got, d.PF)
					}
					if got := resolve(t, filepath.Join(fnDir(byBus[d.PF]), fmt.Sprintf("virtfn%d", d.VFIndex))); got != dir {
						t.Errorf("PF %s virtfn%d -> %s, want %s", d.PF, d.VFIndex, got, dir)
					}
					if _, err := os.Stat(filepath.Join(dir, "sriov_numvfs")); err == nil {
						t.Errorf("VF %s has sriov_numvfs", d.BusID)
					}
					if filepath.Dir(dir) != filepath.Dir(fnDir(byBus[d.PF])) {
						t.Errorf("VF %s is not beside its PF %s", d.BusID, d.PF)
					}
				}
			}
			if got, want := readTrimmed(t, filepath.Join(sys, "class", "misc", "rdma_cm", "dev")), fmt.Sprintf("%d:%d", MiscMajor, RDMACMMinor); got != want {
				t.Errorf("rdma_cm dev %q, want %s", got, want)
			}
		})
	}
}

func TestRDMADevicesNumbering(t *testing.T) {
	tests := []struct {
		machine Machine
		pfs     []string
		// firstVF is the name of the first VF: numbered after the
		// highest PF.
		firstVF string
	}{
		{DGXH100(), []string{"mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"}, "mlx5_12"},
		{DGXA100(), []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"}, "mlx5_10"},
		{HGXH100CPUNICs(), []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}, "mlx5_4"},
	}
	for _, tc := range tests {
		t.Run(tc.machine.Name, func(t *testing.T) {
			devs := tc.machine.RDMADevices()
			if len(devs) != 5*len(tc.pfs) {
				t.Fatalf("%d RDMA devices, want %d PFs with 4 VFs each", len(devs), len(tc.pfs))
			}
			for i, name := range tc.pfs {
				if d := devs[i]; d.Name != name || d.PF != "" || d.Number != rdmaNumber(name) {
					t.Errorf("device %d is %+v, want PF %s", i, d, name)
				}
			}
			vf := devs[len(tc.pfs)]
			if vf.Name != tc.firstVF || vf.PF != devs[0].BusID || vf.VFIndex != 0 || vf.NetDev != devs[0].NetDev+"v0" {
				t.Errorf("first VF %+v, want %s, VF 0 of %s", vf, tc.firstVF, devs[0].BusID)
			}
			for _, d := range devs[len(tc.pfs):] {
				if d.Name != fmt.Sprintf("mlx5_%d", d.Number) || d.NIC != devs[0].NIC {
					t.Errorf("VF %+v: name and number disagree, or another NIC", d)
				}
			}
		})
	}
}
