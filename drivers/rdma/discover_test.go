package rdma_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/strata-sh/strata/drivers/pci"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
)

func TestDiscoverDevices(t *testing.T) {
	tests := []struct {
		machine   hardware.Machine
		linkLayer string
		rateGbps  int64
		model     string
		// gpuSwitch: each NIC shares its PCIe switch with the GPU of the
		// same index; otherwise NICs hang off root ports of their own.
		gpuSwitch bool
	}{
		{hardware.DGXH100(), "InfiniBand", 400, "ConnectX-7", true},
		{hardware.DGXA100(), "InfiniBand", 200, "ConnectX-6", true},
		{hardware.HGXH100CPUNICs(), "Ethernet", 400, "ConnectX-7", false},
	}
	for _, tc := range tests {
		t.Run(tc.machine.Name, func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, tc.machine)
			_, devices := n.discover(ctx, t)
			pfs, want := pfOrder(tc.machine)
			if len(pfs) != len(tc.machine.NICs()) || len(want) != len(pfs)*5 {
				t.Fatalf("preset %s: %d PFs and %d RDMA devices, want %d PFs with 4 VFs each", tc.machine.Name, len(pfs), len(want), len(tc.machine.NICs()))
			}
			var gotNames, wantNames []string
			for _, d := range devices {
				gotNames = append(gotNames, d.Name)
			}
			for _, d := range want {
				wantNames = append(wantNames, draName(d))
			}
			if strings.Join(gotNames, " ") != strings.Join(wantNames, " ") {
				t.Fatalf("devices in order\n  %v\nwant\n  %v", gotNames, wantNames)
			}

			rail := map[string]int64{} // PF bus id -> rail
			for i, pf := range pfs {
				rail[pf.BusID] = int64(i)
			}
			nics := map[string]hardware.PCIFunction{}
			for _, f := range tc.machine.NICs() {
				nics[f.BusID()] = f
			}
			gpus := map[int]hardware.PCIFunction{}
			gpuRoots := map[string]bool{}
			for _, g := range tc.machine.GPUs() {
				gpus[g.Index] = g
				gpuRoots[g.Root()] = true
			}
			topo := pci.NewReader(n.sys)
			rate := resource.MustParse(fmt.Sprintf("%dG", tc.rateGbps))

			for i, dev := range devices {
				hw := want[i]
				pfBus := hw.BusID
				if hw.PF != "" {
					pfBus = hw.PF
				}
				nic := nics[pfBus]

				kind := "nic"
				if hw.PF != "" {
					kind = "vf"
				}
				checkString(t, dev, "type", kind)
				checkString(t, dev, "rdmaDevice", hw.Name)
				checkString(t, dev, "netdev", hw.NetDev)
				checkString(t, dev, "linkLayer", tc.linkLayer)
				checkString(t, dev, "portState", "ACTIVE")
				checkInt(t, dev, "rateGbps", tc.rateGbps)
				if a, ok := dev.Attributes["guid"]; !ok || a.StringValue == nil || *a.StringValue == "" {
					t.Errorf("%s: no guid", dev.Name)
				}
				if tc.linkLayer == "Ethernet" {
					if a, ok := dev.Attributes["mac"]; !ok || a.StringValue == nil || strings.Count(*a.StringValue, ":") != 5 {
						t.Errorf("%s: mac = %v, want an Ethernet MAC address", dev.Name, dev.Attributes["mac"])
					}
				} else {
					checkAbsent(t, dev, "mac")
				}
				checkString(t, dev, "model", tc.model)
				checkInt(t, dev, "rail", rail[pfBus])

				// Topology, as every Strata driver publishes it.
				checkString(t, dev, pci.AttrPCIBusID, hw.BusID)
				checkString(t, dev, pci.AttrPCIeRoot, nic.Root())
				checkInt(t, dev, pci.AttrNUMANode, int64(nic.NUMANode))
				gpu, ok := gpus[nic.Index]
				if !ok {
					t.Fatalf("%s: preset has no GPU %d", tc.machine.Name, nic.Index)
				}
				if tc.gpuSwitch {
					gt, err := topo.Lookup(gpu.BusID())
					if err != nil {
						t.Fatal(err)
					}
					if gt.Switch == "" {
						t.Fatalf("GPU %d has no PCIe switch in the fake tree", gpu.Index)
					}
					// The GPU driver publishes the same value for GPU
					// nic.Index: matchAttribute pairs them.
					checkString(t, dev, pci.AttrPCIeSwitch, gt.Switch)
					checkString(t, dev, pci.AttrPCIeSwitch, nic.Path[2])
				} else {
					checkAbsent(t, dev, pci.AttrPCIeSwitch)
					if root := nic.Root(); gpuRoots[root] {
						t.Errorf("%s: pcieRoot %s is shared with a GPU on %s", dev.Name, root, tc.machine.Name)
					}
				}

				if hw.PF == "" {
					checkInt(t, dev, "sriovTotalVFs", int64(hw.NIC.TotalVFs))
					checkInt(t, dev, "sriovNumVFs", 4)
					checkAbsent(t, dev, "vfIndex")
					checkAbsent(t, dev, "physfn")
					if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
						t.Errorf("%s: a PF must allow multiple allocations", dev.Name)
					}
					c, ok := dev.Capacity["bandwidth"]
					if !ok {
						t.Fatalf("%s: no bandwidth capacity", dev.Name)
					}
					if c.Value.Cmp(rate) != 0 || c.Value.Value() != tc.rateGbps*1_000_000_000 {
						t.Errorf("%s: bandwidth %s, want %s", dev.Name, c.Value.String(), rate.String())
					}
					if c.RequestPolicy == nil || c.RequestPolicy.Default == nil || c.RequestPolicy.Default.Cmp(rate) != 0 {
						t.Errorf("%s: bandwidth request policy %+v, want the full rate %s by default", dev.Name, c.RequestPolicy, rate.String())
					}
				} else {
					checkInt(t, dev, "vfIndex", int64(hw.VFIndex))
					checkString(t, dev, "physfn", hw.PF)
					checkAbsent(t, dev, "sriovTotalVFs")
					checkAbsent(t, dev, "sriovNumVFs")
					if dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations {
						t.Errorf("%s: a VF must not allow multiple allocations", dev.Name)
					}
				}
				if len(dev.Taints) != 0 {
					t.Errorf("%s: taints %+v on an ACTIVE port", dev.Name, dev.Taints)
				}
				if c := len(dev.Attributes) + len(dev.Capacity); c > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
					t.Errorf("%s: %d attributes and capacities, over the API limit of %d", dev.Name, c, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
				}
			}
		})
	}
}

func TestDiscoverWithoutRDMADevices(t *testing.T) {
	// A GPU node without RDMA NICs publishes nothing and is no error.
	m := hardware.DGXH100()
	var gpusOnly []hardware.PCIFunction
	for _, f := range m.Functions {
		if f.Kind == hardware.KindGPU {
			gpusOnly = append(gpusOnly, f)
		}
	}
	m.Functions = gpusOnly
	ctx := testContext(t)
	n := writeNode(t, m)
	b, err := rdma.New(n.config())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n.b = b
	if _, devs := n.discover(ctx, t); len(devs) != 0 {
		t.Errorf("%d devices on a node without RDMA NICs", len(devs))
	}
}

func TestRailDevices(t *testing.T) {
	tests := []struct {
		name    string
		machine hardware.Machine
		rails   []string
		// want is the rail of each PF by RDMA device; wantErr a text the
		// error of New must contain (and name the device).
		want    map[string]int64
		wantErr []string
	}{
		{
			name:    "reversed",
			machine: hardware.DGXH100(),
			rails:   []string{"mlx5_11", "mlx5_10", "mlx5_9", "mlx5_6", "mlx5_5", "mlx5_4", "mlx5_3", "mlx5_0"},
			want:    map[string]int64{"mlx5_11": 0, "mlx5_10": 1, "mlx5_9": 2, "mlx5_6": 3, "mlx5_5": 4, "mlx5_4": 5, "mlx5_3": 6, "mlx5_0": 7},
		},
		{
			name:    "pairs swapped",
			machine: hardware.DGXA100(),
			rails:   []string{"mlx5_1", "mlx5_0", "mlx5_3", "mlx5_2", "mlx5_7", "mlx5_6", "mlx5_9", "mlx5_8"},
			want:    map[string]int64{"mlx5_1": 0, "mlx5_0": 1, "mlx5_3": 2, "mlx5_2": 3, "mlx5_7": 4, "mlx5_6": 5, "mlx5_9": 6, "mlx5_8": 7},
		},
		{
			name:    "unknown device",
			machine: hardware.HGXH100CPUNICs(),
			rails:   []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_99"},
			wantErr: []string{"mlx5_99"},
		},
		{
			name:    "a VF is not a rail",
			machine: hardware.HGXH100CPUNICs(),
			rails:   []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4"},
			wantErr: []string{"mlx5_4"},
		},
		{
			name:    "listed twice",
			machine: hardware.HGXH100CPUNICs(),
			rails:   []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_1"},
			wantErr: []string{"mlx5_1", "twice"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := sharedNode(t, tc.machine)
			b, err := rdma.New(n.config(func(c *rdma.Config) { c.RailDevices = tc.rails }))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("New with rail devices %v succeeded, want an error naming %v", tc.rails, tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			n.b = b
			_, devices := n.discover(testContext(t), t)
			railOfPF := map[string]int64{}
			seen := 0
			for _, dev := range devices {
				if *dev.Attributes["type"].StringValue != "nic" {
					continue
				}
				seen++
				name := *dev.Attributes["rdmaDevice"].StringValue
				checkInt(t, dev, "rail", tc.want[name])
				railOfPF[*dev.Attributes[pci.AttrPCIBusID].StringValue] = tc.want[name]
			}
			if seen != len(tc.want) {
				t.Errorf("%d PFs published, want %d", seen, len(tc.want))
			}
			for _, dev := range devices {
				if *dev.Attributes["type"].StringValue == "vf" {
					checkInt(t, dev, "rail", railOfPF[*dev.Attributes["physfn"].StringValue])
				}
			}
			// Rails do not change the publishing order (PCI address).
			_, order := pfOrder(tc.machine)
			for i, dev := range devices {
				if dev.Name != draName(order[i]) {
					t.Errorf("device %d is %s, want %s", i, dev.Name, draName(order[i]))
				}
			}
		})
	}
}

func TestPortDownTaint(t *testing.T) {
	tests := []struct {
		name    string
		machine hardware.Machine
		rdmaDev string // port taken down
	}{
		{"PF on InfiniBand", hardware.DGXH100(), "mlx5_3"},
		{"VF on InfiniBand", hardware.DGXA100(), "mlx5_10"},
		{"PF on Ethernet", hardware.HGXH100CPUNICs(), "mlx5_2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := writeNode(t, tc.machine)
			n.setPortState(t, tc.rdmaDev, "1: DOWN")
			b, err := rdma.New(n.config())
			if err != nil {
				t.Fatal(err)
			}
			n.b = b
			_, devices := n.discover(testContext(t), t)
			down := draName(n.rdmaDevice(t, tc.rdmaDev))
			tainted := 0
			for _, dev := range devices {
				if dev.Name != down {
					if len(dev.Taints) != 0 {
						t.Errorf("%s: taints %+v, but only %s is down", dev.Name, dev.Taints, down)
					}
					continue
				}
				tainted++
				checkString(t, dev, "portState", "DOWN")
				if len(dev.Taints) != 1 || dev.Taints[0].Key != rdma.PortDownTaint || dev.Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
					t.Errorf("%s: taints %+v, want one NoSchedule taint %s", dev.Name, dev.Taints, rdma.PortDownTaint)
				}
			}
			if tainted != 1 {
				t.Errorf("device %s published %d times", down, tainted)
			}
		})
	}
}

// watcher runs WatchHealth until stopped and counts its change reports.
type watcher struct {
	cancel  context.CancelFunc
	done    chan struct{}
	changed chan struct{}
	mu      sync.Mutex
	calls   int
}

func watch(ctx context.Context, b *rdma.Backend) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}, 1)}
	go func() {
		defer close(w.done)
		b.WatchHealth(ctx, func() {
			w.mu.Lock()
			w.calls++
			w.mu.Unlock()
			select {
			case w.changed <- struct{}{}:
			default:
			}
		})
	}()
	return w
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// waitChanged waits for a change report, with a deadline.
func (w *watcher) waitChanged(t *testing.T, what string) {
	t.Helper()
	select {
	case <-w.changed:
	case <-time.After(10 * time.Second):
		t.Fatalf("WatchHealth did not report %s within 10s", what)
	}
}

// stop cancels WatchHealth and waits for it to return.
func (w *watcher) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("WatchHealth did not return after its context ended")
	}
}

func TestWatchHealth(t *testing.T) {
	const interval = 10 * time.Millisecond
	ctx := testContext(t)
	n := writeNode(t, hardware.DGXH100())
	b, err := rdma.New(n.config(func(c *rdma.Config) { c.HealthInterval = interval }))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n.b = b
	target := draName(n.rdmaDevice(t, "mlx5_4"))
	taints := func() []resourceapi.DeviceTaint {
		t.Helper()
		byName, _ := n.discover(ctx, t)
		dev, ok := byName[target]
		if !ok {
			t.Fatalf("%s not published", target)
		}
		return dev.Taints
	}
	if got := taints(); len(got) != 0 {
		t.Fatalf("%s tainted before its port went down: %+v", target, got)
	}

	// Nothing changes: no report over many checks (waited for as proof
	// that the watcher looked).
	w := watch(ctx, n.b)
	start := rdma.Probes(n.b)
	if err := wait.PollUntilContextTimeout(ctx, interval, 10*time.Second, true, func(context.Context) (bool, error) {
		return rdma.Probes(n.b) >= start+20, nil
	}); err != nil {
		t.Fatalf("WatchHealth made %d checks in 10s: %v", rdma.Probes(n.b)-start, err)
	}
	if c := w.count(); c != 0 {
		t.Errorf("WatchHealth reported %d changes while every port stayed ACTIVE", c)
	}

	n.setPortState(t, "mlx5_4", "1: DOWN")
	w.waitChanged(t, "the port going down")
	w.stop(t)
	if got := taints(); len(got) != 1 || got[0].Key != rdma.PortDownTaint || got[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Fatalf("after the port went down %s has taints %+v, want %s NoSchedule", target, got, rdma.PortDownTaint)
	}

	// The port comes back: reported again, and the taint is gone.
	w = watch(ctx, n.b)
	n.setPortState(t, "mlx5_4", "4: ACTIVE")
	w.waitChanged(t, "the port coming back")
	w.stop(t)
	if got := taints(); len(got) != 0 {
		t.Errorf("after the port came back %s has taints %+v", target, got)
	}
}
