package rdma_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/linkmock"
	"github.com/strata-sh/strata/internal/linkctl"
)

// node is a fake machine under a test's temp dir: its sysfs tree, its
// links (the kernel's rtnetlink state) and a backend on both.
type node struct {
	m     hardware.Machine
	root  string
	sys   string
	links *linkmock.Links
	b     *rdma.Backend
}

// newNode starts a backend on a fake node of m whose sysfs tree is shared
// with other tests (read only) and whose links are its own; opts adjust
// the backend's configuration.
func newNode(t *testing.T, m hardware.Machine, opts ...func(*rdma.Config)) *node {
	t.Helper()
	n := sharedNode(t, m)
	b, err := rdma.New(n.config(opts...))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n.b = b
	return n
}

// writeNode renders m under t.TempDir(), for a test that changes the
// tree, without starting a backend.
func writeNode(t *testing.T, m hardware.Machine) *node {
	t.Helper()
	root := t.TempDir()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	return &node{m: m, root: root, sys: filepath.Join(root, hardware.SysDir), links: linkmock.New(m)}
}

// trees are the fake nodes rendered once per preset for the tests that
// only read sysfs (rendering one takes a while on a busy machine).
var trees struct {
	mu    sync.Mutex
	dir   string
	roots map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if trees.dir != "" {
		os.RemoveAll(trees.dir)
	}
	os.Exit(code)
}

// sharedNode is a node on the preset's shared tree with links of its own;
// the test must not write to the tree.
func sharedNode(t *testing.T, m hardware.Machine) *node {
	t.Helper()
	trees.mu.Lock()
	defer trees.mu.Unlock()
	if trees.dir == "" {
		dir, err := os.MkdirTemp("", "rdma-test-")
		if err != nil {
			t.Fatal(err)
		}
		trees.dir, trees.roots = dir, map[string]string{}
	}
	root, ok := trees.roots[m.Name]
	if !ok {
		root = filepath.Join(trees.dir, m.Name)
		if err := hardware.WriteNode(root, m, "boot"); err != nil {
			t.Fatal(err)
		}
		trees.roots[m.Name] = root
	}
	return &node{m: m, root: root, sys: filepath.Join(root, hardware.SysDir), links: linkmock.New(m)}
}

func (n *node) config(opts ...func(*rdma.Config)) rdma.Config {
	cfg := rdma.Config{SysfsRoot: n.sys, DevRoot: n.root, Links: n.links}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// discover runs Discover and returns the devices by name, and in order.
func (n *node) discover(ctx context.Context, t *testing.T) (map[string]resourceapi.Device, []resourceapi.Device) {
	t.Helper()
	inv, err := n.b.Discover(ctx)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range inv.Devices {
		if _, dup := byName[d.Name]; dup {
			t.Errorf("device %s published twice", d.Name)
		}
		byName[d.Name] = d
	}
	return byName, inv.Devices
}

// setPortState writes an RDMA device's port state as the kernel shows it
// ("4: ACTIVE", "1: DOWN").
func (n *node) setPortState(t *testing.T, rdmaDev, state string) {
	t.Helper()
	if err := writeFile(filepath.Join(n.sys, "class", "infiniband", rdmaDev, "ports", "1", "state"), state+"\n"); err != nil {
		t.Fatal(err)
	}
}

// rdmaDevice returns the machine's RDMA device of that kernel name.
func (n *node) rdmaDevice(t *testing.T, name string) hardware.RDMADevice {
	t.Helper()
	for _, d := range n.m.RDMADevices() {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("%s has no RDMA device %s", n.m.Name, name)
	return hardware.RDMADevice{}
}

// draName is the DRA device name of an RDMA device of the machine: its
// PCI address with ':' and '.' turned into '-'.
func draName(d hardware.RDMADevice) string {
	kind := "nic-"
	if d.PF != "" {
		kind = "vf-"
	}
	return kind + strings.NewReplacer(":", "-", ".", "-").Replace(d.BusID)
}

// pfOrder returns a machine's RDMA devices in the order the driver must
// publish them: physical functions by PCI address, each followed by its
// virtual functions by VF index.
func pfOrder(m hardware.Machine) (pfs []hardware.RDMADevice, ordered []hardware.RDMADevice) {
	vfs := map[string][]hardware.RDMADevice{}
	for _, d := range m.RDMADevices() {
		if d.PF == "" {
			pfs = append(pfs, d)
		} else {
			vfs[d.PF] = append(vfs[d.PF], d)
		}
	}
	sort.Slice(pfs, func(i, j int) bool { return pfs[i].BusID < pfs[j].BusID })
	for _, pf := range pfs {
		ordered = append(ordered, pf)
		v := vfs[pf.BusID]
		sort.Slice(v, func(i, j int) bool { return v[i].VFIndex < v[j].VFIndex })
		ordered = append(ordered, v...)
	}
	return pfs, ordered
}

// nicConfig is an opaque NicConfig with the given vf section (JSON), or
// none when vf is empty.
func nicConfig(vf string) json.RawMessage {
	s := `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig"`
	if vf != "" {
		s += `,"vf":` + vf
	}
	return json.RawMessage(s + "}")
}

// request is a claim of the given devices, as the plugin hands it over.
func request(devices ...plugin.AllocatedDevice) *plugin.PrepareRequest {
	return &plugin.PrepareRequest{
		Claim:   &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim", UID: "uid-1"}},
		Devices: devices,
	}
}

// alloc is a device with the configuration the plugin core makes of
// configs (lowest precedence first); they must decode.
func alloc(device string, configs ...json.RawMessage) plugin.AllocatedDevice {
	a, err := allocWith(device, configs...)
	if err != nil {
		panic(fmt.Sprintf("test config does not decode: %v", err))
	}
	return a
}

// allocWith is alloc for configs that may not decode: the error is the
// one the plugin core refuses the claim with.
func allocWith(device string, configs ...json.RawMessage) (plugin.AllocatedDevice, error) {
	h := (*rdma.Backend)(nil).ConfigHandler()
	var decoded []any
	for _, raw := range configs {
		v, err := h.Decode(raw)
		if err != nil {
			return plugin.AllocatedDevice{}, err
		}
		decoded = append(decoded, v)
	}
	cfg, err := h.Effective(decoded)
	if err != nil {
		return plugin.AllocatedDevice{}, err
	}
	return plugin.AllocatedDevice{Request: "nic", Pool: "node-a", Device: device, Config: cfg}, nil
}

var claimRef = plugin.ClaimRef{Namespace: "ns", Name: "claim", UID: "uid-1"}

// interrupted is what the checkpoint holds of devices whose prepare was
// started but never completed: identity only, no edits, no state.
func interrupted(devs []plugin.PreparedDevice) []plugin.PreparedDevice {
	out := make([]plugin.PreparedDevice, len(devs))
	for i, d := range devs {
		out[i] = plugin.PreparedDevice{Request: d.Request, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID}
	}
	return out
}

// viaCheckpoint round-trips prepared devices through JSON, as the
// plugin's checkpoint stores them.
func viaCheckpoint(t *testing.T, devs []plugin.PreparedDevice) []plugin.PreparedDevice {
	t.Helper()
	raw, err := json.Marshal(devs)
	if err != nil {
		t.Fatal(err)
	}
	var out []plugin.PreparedDevice
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func checkString(t *testing.T, dev resourceapi.Device, name resourceapi.QualifiedName, want string) {
	t.Helper()
	attr, ok := dev.Attributes[name]
	if !ok || attr.StringValue == nil {
		t.Errorf("%s: no string attribute %s, want %q", dev.Name, name, want)
		return
	}
	if *attr.StringValue != want {
		t.Errorf("%s: %s = %q, want %q", dev.Name, name, *attr.StringValue, want)
	}
}

func checkInt(t *testing.T, dev resourceapi.Device, name resourceapi.QualifiedName, want int64) {
	t.Helper()
	attr, ok := dev.Attributes[name]
	if !ok || attr.IntValue == nil {
		t.Errorf("%s: no int attribute %s, want %d", dev.Name, name, want)
		return
	}
	if *attr.IntValue != want {
		t.Errorf("%s: %s = %d, want %d", dev.Name, name, *attr.IntValue, want)
	}
}

func checkAbsent(t *testing.T, dev resourceapi.Device, name resourceapi.QualifiedName) {
	t.Helper()
	if attr, ok := dev.Attributes[name]; ok {
		t.Errorf("%s: attribute %s = %s, want none", dev.Name, name, attrString(attr))
	}
}

func attrString(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return fmt.Sprintf("%q", *a.StringValue)
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return "<empty>"
}

// flakyLinks fails the n-th SetVF or SetMTU call (1-based; 0 never) and
// passes everything else to the fake kernel.
type flakyLinks struct {
	linkctl.Control
	failSetVF, failSetMTU int

	mu            sync.Mutex
	setVF, setMTU int
}

func (l *flakyLinks) SetVF(pf string, vf int, s linkctl.VFState) error {
	l.mu.Lock()
	l.setVF++
	n := l.setVF
	l.mu.Unlock()
	if n == l.failSetVF {
		return fmt.Errorf("injected SetVF failure (%s vf %d)", pf, vf)
	}
	return l.Control.SetVF(pf, vf, s)
}

func (l *flakyLinks) SetMTU(ifname string, mtu int) error {
	l.mu.Lock()
	l.setMTU++
	n := l.setMTU
	l.mu.Unlock()
	if n == l.failSetMTU {
		return fmt.Errorf("injected SetMTU failure (%s)", ifname)
	}
	return l.Control.SetMTU(ifname, mtu)
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
