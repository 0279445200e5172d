package rdma

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	configv1alpha1 "github.com/strata-sh/strata/api/config/v1alpha1"
)

// writePF renders the sysfs entries readPort reads of one physical
// function, mlx5_0 at 0000:18:00.0, with the given file contents.
func writePF(t *testing.T, sys string, files map[string]string) string {
	t.Helper()
	fn := filepath.Join(sys, "devices", "pci0000:00", "0000:00:01.0", "0000:18:00.0")
	for name, content := range files {
		p := filepath.Join(fn, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	classDir := filepath.Join(sys, "class", "infiniband")
	if err := os.MkdirAll(classDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "devices", "pci0000:00", "0000:00:01.0", "0000:18:00.0", "infiniband", "mlx5_0"),
		filepath.Join(classDir, "mlx5_0")); err != nil {
		t.Fatal(err)
	}
	return classDir
}

// FuzzReadPort: what sysfs shows of an RDMA port (rate, state, link
// layer, the uverbs and umad device numbers, SR-IOV counts) either fails
// the port or reads as a port the plugin can publish and hand to a
// container: numbers a device can have, a rate and VF counts that are
// not negative, a published capacity that is not negative.
func FuzzReadPort(f *testing.F) {
	f.Add("400 Gb/sec (4X NDR)", "4: ACTIVE", "InfiniBand", "231:192", "231:0", "16", "4")
	f.Add("200 Gb/sec (2X HDR)", "1: DOWN", "Ethernet", "231:193\n", "", "0", "0")
	f.Add("2500 Mb/sec (1X SDR)", "ACTIVE", "", "231:200", "junk", "", "x")
	f.Fuzz(func(t *testing.T, rate, state, linkLayer, verbsDev, umadDev, totalVFs, numVFs string) {
		sys := t.TempDir()
		files := map[string]string{
			"vendor": "0x15b3\n", "device": "0x1021\n",
			"sriov_totalvfs": totalVFs, "sriov_numvfs": numVFs,
			"infiniband/mlx5_0/node_guid":          "b83f:d203:00a1:0000\n",
			"infiniband/mlx5_0/ports/1/rate":       rate,
			"infiniband/mlx5_0/ports/1/state":      state,
			"infiniband/mlx5_0/ports/1/link_layer": linkLayer,
			"infiniband_verbs/uverbs0/ibdev":       "mlx5_0\n",
			"infiniband_verbs/uverbs0/dev":         verbsDev,
			"net/ibp24s0/address":                  "b8:3f:d2:a1:00:00\n",
		}
		if umadDev != "" {
			files["infiniband_mad/umad0/ibdev"] = "mlx5_0\n"
			files["infiniband_mad/umad0/dev"] = umadDev
		}
		classDir := writePF(t, sys, files)
		p, err := readPort(classDir, "mlx5_0")
		if err != nil {
			return
		}
		if p.busID != "0000:18:00.0" || p.isVF() || p.netdev != "ibp24s0" {
			t.Errorf("port %+v", p)
		}
		for what, d := range map[string]devNumber{"uverbs": p.verbs, "umad": p.umad} {
			if d == (devNumber{}) && what == "umad" {
				continue
			}
			if d.major <= 0 || d.major > 4095 || d.minor < 0 || d.minor >= 1<<20 {
				t.Errorf("%s device number %d:%d from %q", what, d.major, d.minor, map[string]string{"uverbs": verbsDev, "umad": umadDev}[what])
			}
		}
		if p.rateGbps < 0 {
			t.Errorf("rate %q read as %d Gb/s", rate, p.rateGbps)
		}
		if p.totalVFs < 0 || p.numVFs < 0 {
			t.Errorf("SR-IOV counts %q/%q read as %d/%d", numVFs, totalVFs, p.numVFs, p.totalVFs)
		}
		p.name = "nic-0"
		dev := buildDevice(p)
		for name, c := range dev.Capacity {
			if c.Value.Sign() < 0 {
				t.Errorf("device publishes capacity %s = %s", name, c.Value.String())
			}
		}
	})
}

// FuzzNicConfigHandler: VF settings that decode merge, field by field,
// into settings that are valid on their own, and the merge leaves the
// decoded configs alone.
func FuzzNicConfigHandler(f *testing.F) {
	const head = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig"`
	f.Add([]byte(head+`,"vf":{"vlan":100,"trust":true,"spoofCheck":false,"mtu":9000}}`), []byte(head+`,"vf":{"vlanQoS":5,"maxTxRate":"25G"}}`))
	f.Add([]byte(head+`}`), []byte("apiVersion: config.strata.sh/v1alpha1\nkind: NicConfig\nvf:\n  mtu: 1500\n"))
	f.Fuzz(func(t *testing.T, class, claim []byte) {
		h := configHandler{}
		a, errA := h.Decode(class)
		b, errB := h.Decode(claim)
		if errA != nil || errB != nil {
			return
		}
		ca, cb := a.(*configv1alpha1.NicConfig).DeepCopy(), b.(*configv1alpha1.NicConfig).DeepCopy()
		merged, err := h.Effective([]any{a, b})
		if err != nil {
			t.Fatalf("merge of two valid configs: %v", err)
		}
		if errs := merged.(*configv1alpha1.NicConfig).Validate(); len(errs) > 0 {
			t.Errorf("merge of two valid configs is invalid: %v", errs.ToAggregate())
		}
		if !cmp.Equal(ca, a) || !cmp.Equal(cb, b) {
			t.Errorf("Effective changed the decoded configs")
		}
	})
}
