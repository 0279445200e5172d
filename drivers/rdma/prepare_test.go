package rdma_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/strata-sh/strata/drivers/plugin"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/internal/linkctl"
)

// wantNode is a device node a container must get.
func wantNode(root, name string, major, minor int64) cdispec.DeviceNode {
	return cdispec.DeviceNode{Path: "/dev/infiniband/" + name, HostPath: filepath.Join(root, "dev", "infiniband", name), Type: "c", Major: major, Minor: minor}
}

func nodes(in []*cdispec.DeviceNode) []cdispec.DeviceNode {
	out := make([]cdispec.DeviceNode, 0, len(in))
	for _, n := range in {
		out = append(out, *n)
	}
	return out
}

// envList returns the comma-separated value of NAME=<prefix>... sorted,
// or nil when the variable is unset or its value lacks the prefix.
func envList(env []string, name, prefix string) []string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="+prefix); ok {
			list := strings.Split(v, ",")
			sort.Strings(list)
			return list
		}
	}
	return nil
}

// checkCommon checks the edits every container of a claim gets: the
// connection manager and exactly the claim's HCAs for NCCL and UCX.
func checkCommon(t *testing.T, n *node, common cdispec.ContainerEdits, hcas ...string) {
	t.Helper()
	if got, want := nodes(common.DeviceNodes), []cdispec.DeviceNode{wantNode(n.root, "rdma_cm", hardware.MiscMajor, hardware.RDMACMMinor)}; !reflect.DeepEqual(got, want) {
		t.Errorf("common device nodes %+v, want %+v", got, want)
	}
	sort.Strings(hcas)
	if got := envList(common.Env, "NCCL_IB_HCA", "="); !reflect.DeepEqual(got, hcas) {
		t.Errorf("NCCL_IB_HCA names %v (env %q), want exactly %v with the exact-match prefix '='", got, common.Env, hcas)
	}
	var ucx []string
	for _, h := range hcas {
		ucx = append(ucx, h+":1")
	}
	if got := envList(common.Env, "UCX_NET_DEVICES", ""); !reflect.DeepEqual(got, ucx) {
		t.Errorf("UCX_NET_DEVICES names %v (env %q), want %v", got, common.Env, ucx)
	}
	if len(common.NetDevices) != 0 {
		t.Errorf("common edits carry netDevices %+v", common.NetDevices)
	}
}

func TestPrepareDeviceNodesAndEnv(t *testing.T) {
	share := types.UID("share-1")
	tests := []struct {
		name    string
		machine hardware.Machine
		// devices are RDMA device names; each becomes one allocated
		// device (a PF may appear twice: two requests sharing it).
		devices []string
		shareID *types.UID
		// hcas is what NCCL and UCX must be told.
		hcas []string
	}{
		{name: "InfiniBand PF", machine: hardware.DGXH100(), devices: []string{"mlx5_3"}, shareID: &share, hcas: []string{"mlx5_3"}},
		{name: "Ethernet PF", machine: hardware.HGXH100CPUNICs(), devices: []string{"mlx5_2"}, shareID: &share, hcas: []string{"mlx5_2"}},
		{name: "InfiniBand VF", machine: hardware.DGXH100(), devices: []string{"mlx5_13"}, hcas: []string{"mlx5_13"}},
		{name: "Ethernet VF", machine: hardware.HGXH100CPUNICs(), devices: []string{"mlx5_5"}, hcas: []string{"mlx5_5"}},
		{name: "two PFs", machine: hardware.DGXA100(), devices: []string{"mlx5_6", "mlx5_1"}, hcas: []string{"mlx5_1", "mlx5_6"}},
		{name: "PF twice and a VF", machine: hardware.DGXH100(), devices: []string{"mlx5_0", "mlx5_0", "mlx5_20"}, hcas: []string{"mlx5_0", "mlx5_20"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, tc.machine)
			n.discover(ctx, t)
			var allocs []plugin.AllocatedDevice
			var hw []hardware.RDMADevice
			for i, name := range tc.devices {
				d := n.rdmaDevice(t, name)
				hw = append(hw, d)
				a := alloc(draName(d))
				a.Request = fmt.Sprintf("req-%d", i)
				if d.PF == "" {
					a.ShareID = tc.shareID
				}
				allocs = append(allocs, a)
			}
			req := request(allocs...)
			if err := n.b.Validate(ctx, req); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			resp, err := n.b.Prepare(ctx, req)
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if len(resp.Devices) != len(allocs) {
				t.Fatalf("%d prepared devices for %d allocated", len(resp.Devices), len(allocs))
			}
			for i, d := range hw {
				got := resp.Devices[i]
				a := allocs[i]
				if got.Request != a.Request || got.Pool != a.Pool || got.Device != a.Device || !reflect.DeepEqual(got.ShareID, a.ShareID) {
					t.Errorf("prepared device %d is %s/%s/%s share %v, want %s/%s/%s share %v", i, got.Request, got.Pool, got.Device, got.ShareID, a.Request, a.Pool, a.Device, a.ShareID)
				}
				want := []cdispec.DeviceNode{wantNode(n.root, fmt.Sprintf("uverbs%d", d.Number), hardware.InfiniBandMajor, int64(hardware.UverbsBase+d.Number))}
				if d.NIC.LinkLayer == hardware.LinkInfiniBand {
					want = append(want, wantNode(n.root, fmt.Sprintf("umad%d", d.Number), hardware.InfiniBandMajor, int64(d.Number)))
				}
				if gotNodes := nodes(got.Edits.DeviceNodes); !reflect.DeepEqual(gotNodes, want) {
					t.Errorf("%s device nodes\n  %+v\nwant\n  %+v", got.Device, gotNodes, want)
				}
				var wantNet []*cdispec.LinuxNetDevice
				if d.PF != "" {
					wantNet = []*cdispec.LinuxNetDevice{{HostInterfaceName: d.NetDev, Name: d.NetDev}}
				}
				if !reflect.DeepEqual(got.Edits.NetDevices, wantNet) {
					t.Errorf("%s netDevices %+v, want %+v", got.Device, got.Edits.NetDevices, wantNet)
				}
			}
			checkCommon(t, n, resp.Common, tc.hcas...)

			// Without VF settings no link is touched, neither by
			// prepare nor by unprepare (after a restart).
			if s := n.links.Sets(); s != 0 {
				t.Errorf("prepare without config made %d VF changes", s)
			}
			b2, err := rdma.New(n.config())
			if err != nil {
				t.Fatal(err)
			}
			if err := b2.Unprepare(ctx, claimRef, viaCheckpoint(t, resp.Devices)); err != nil {
				t.Fatalf("Unprepare: %v", err)
			}
			if s, c := n.links.Sets(), n.links.Changed(); s != 0 || len(c) != 0 {
				t.Errorf("unprepare of a claim without config made %d VF changes; changed: %v", s, c)
			}
		})
	}
}

func TestVFConfig(t *testing.T) {
	tests := []struct {
		name    string
		machine hardware.Machine
		vf      string // RDMA device of the VF
		// initial is set on the VF before the claim (an operator's
		// settings), nil for the kernel's defaults.
		initial *linkctl.VFState
		configs []json.RawMessage
		want    linkctl.VFState
		wantMTU int
	}{
		{
			name: "every setting on Ethernet", machine: hardware.HGXH100CPUNICs(), vf: "mlx5_5",
			configs: []json.RawMessage{nicConfig(`{"vlan":100,"vlanQoS":3,"trust":true,"spoofCheck":false,"mtu":9000,"maxTxRate":"100G"}`)},
			want:    linkctl.VFState{VLAN: 100, QoS: 3, Trust: true, SpoofCheck: false, MaxTxRateMbps: 100_000}, wantMTU: 9000,
		},
		{
			name: "class then claim", machine: hardware.HGXH100CPUNICs(), vf: "mlx5_9",
			configs: []json.RawMessage{
				nicConfig(`{"vlan":10,"trust":true,"mtu":1400}`), // class
				nicConfig(`{"vlan":20,"maxTxRate":"25G"}`),       // claim
			},
			want: linkctl.VFState{VLAN: 20, Trust: true, SpoofCheck: true, MaxTxRateMbps: 25_000}, wantMTU: 1400,
		},
		{
			name: "claim overrides a class field it sets", machine: hardware.HGXH100CPUNICs(), vf: "mlx5_4",
			configs: []json.RawMessage{
				nicConfig(`{"vlan":7,"spoofCheck":false,"maxTxRate":"50G"}`),
				nicConfig(`{"spoofCheck":true}`),
			},
			want: linkctl.VFState{VLAN: 7, SpoofCheck: true, MaxTxRateMbps: 50_000}, wantMTU: 1500,
		},
		{
			name: "config without vf section", machine: hardware.HGXH100CPUNICs(), vf: "mlx5_4",
			configs: []json.RawMessage{nicConfig(`{"trust":true}`), nicConfig("")},
			want:    linkctl.VFState{Trust: true, SpoofCheck: true}, wantMTU: 1500,
		},
		{
			name: "restores an operator's settings", machine: hardware.HGXH100CPUNICs(), vf: "mlx5_6",
			initial: &linkctl.VFState{Trust: true, SpoofCheck: true, MaxTxRateMbps: 1000},
			configs: []json.RawMessage{nicConfig(`{"vlan":5}`)},
			want:    linkctl.VFState{VLAN: 5, Trust: true, SpoofCheck: true, MaxTxRateMbps: 1000}, wantMTU: 1500,
		},
		{
			name: "InfiniBand trust and MTU", machine: hardware.DGXH100(), vf: "mlx5_17",
			configs: []json.RawMessage{nicConfig(`{"trust":true,"mtu":2044,"maxTxRate":"200G"}`)},
			want:    linkctl.VFState{Trust: true, SpoofCheck: true, MaxTxRateMbps: 200_000}, wantMTU: 2044,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, tc.machine)
			n.discover(ctx, t)
			vf := n.rdmaDevice(t, tc.vf)
			pf := n.rdmaDevice(t, nameOfPF(t, n, vf))
			if tc.initial != nil {
				if err := n.links.SetVF(pf.NetDev, vf.VFIndex, *tc.initial); err != nil {
					t.Fatal(err)
				}
			}
			before := n.links.Changed()
			beforeState, beforeMTU := n.links.State(pf.NetDev, vf.VFIndex, vf.NetDev)

			req := request(alloc(draName(vf), tc.configs...))
			if err := n.b.Validate(ctx, req); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			resp, err := n.b.Prepare(ctx, req)
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if got, mtu := n.links.State(pf.NetDev, vf.VFIndex, vf.NetDev); got != tc.want || mtu != tc.wantMTU {
				t.Errorf("VF %d of %s after prepare: %+v mtu %d, want %+v mtu %d", vf.VFIndex, pf.NetDev, got, mtu, tc.want, tc.wantMTU)
			}
			// Only this VF changed.
			for _, c := range n.links.Changed() {
				if !strings.HasPrefix(c, fmt.Sprintf("%s vf %d ", pf.NetDev, vf.VFIndex)) && !strings.HasPrefix(c, vf.NetDev+" mtu") {
					t.Errorf("prepare of %s changed %s", vf.Name, c)
				}
			}
			if want := []*cdispec.LinuxNetDevice{{HostInterfaceName: vf.NetDev, Name: vf.NetDev}}; !reflect.DeepEqual(resp.Devices[0].Edits.NetDevices, want) {
				t.Errorf("netDevices %+v, want %+v", resp.Devices[0].Edits.NetDevices, want)
			}

			// Unprepared by a restarted plugin from its checkpoint.
			b2, err := rdma.New(n.config())
			if err != nil {
				t.Fatal(err)
			}
			devs := viaCheckpoint(t, resp.Devices)
			if err := b2.Unprepare(ctx, claimRef, devs); err != nil {
				t.Fatalf("Unprepare: %v", err)
			}
			if got, mtu := n.links.State(pf.NetDev, vf.VFIndex, vf.NetDev); got != beforeState || mtu != beforeMTU {
				t.Errorf("VF after unprepare: %+v mtu %d, want it back at %+v mtu %d", got, mtu, beforeState, beforeMTU)
			}
			if after := n.links.Changed(); !reflect.DeepEqual(after, before) {
				t.Errorf("links after unprepare differ from before the claim:\n  %v\nwant\n  %v", after, before)
			}
			// Unprepare is idempotent.
			if err := b2.Unprepare(ctx, claimRef, devs); err != nil {
				t.Fatalf("second Unprepare: %v", err)
			}
			if after := n.links.Changed(); !reflect.DeepEqual(after, before) {
				t.Errorf("links after a second unprepare: %v, want %v", after, before)
			}
		})
	}
}

// nameOfPF returns the RDMA device name of a VF's physical function.
func nameOfPF(t *testing.T, n *node, vf hardware.RDMADevice) string {
	t.Helper()
	for _, d := range n.m.RDMADevices() {
		if d.PF == "" && d.BusID == vf.PF {
			return d.Name
		}
	}
	t.Fatalf("%s: no PF %s", vf.Name, vf.PF)
	return ""
}

func TestUnprepareInterruptedResetsVF(t *testing.T) {
	tests := []struct {
		name    string
		machine hardware.Machine
		devices []string
		config  json.RawMessage
	}{
		{"Ethernet VF", hardware.HGXH100CPUNICs(), []string{"mlx5_7"}, nicConfig(`{"vlan":100,"vlanQoS":1,"trust":true,"spoofCheck":false,"mtu":9000,"maxTxRate":"10G"}`)},
		{"InfiniBand VF", hardware.DGXA100(), []string{"mlx5_11"}, nicConfig(`{"trust":true,"mtu":1024}`)},
		{"PF and two VFs", hardware.DGXH100(), []string{"mlx5_0", "mlx5_12", "mlx5_13"}, nicConfig(`{"trust":true,"mtu":2044}`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, tc.machine)
			n.discover(ctx, t)
			var allocs []plugin.AllocatedDevice
			for _, name := range tc.devices {
				d := n.rdmaDevice(t, name)
				if d.PF == "" {
					allocs = append(allocs, alloc(draName(d)))
				} else {
					allocs = append(allocs, alloc(draName(d), tc.config))
				}
			}
			resp, err := n.b.Prepare(ctx, request(allocs...))
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if len(n.links.Changed()) == 0 {
				t.Fatal("prepare changed no link; the test proves nothing")
			}
			// The plugin died after the VF was configured and before the
			// checkpoint recorded the result: only identities are left.
			b2, err := rdma.New(n.config())
			if err != nil {
				t.Fatal(err)
			}
			if err := b2.Unprepare(ctx, claimRef, viaCheckpoint(t, interrupted(resp.Devices))); err != nil {
				t.Fatalf("Unprepare: %v", err)
			}
			if c := n.links.Changed(); len(c) != 0 {
				t.Errorf("after unprepare of an interrupted prepare these are not at defaults: %v", c)
			}
		})
	}
}

// TestUnprepareRestoresVFWhoseDeviceIsGone: the checkpoint's state names
// the links, so a VF whose RDMA device left sysfs (the driver was
// reloaded) between prepare and unprepare is still put back.
func TestUnprepareRestoresVFWhoseDeviceIsGone(t *testing.T) {
	ctx := testContext(t)
	n := writeNode(t, hardware.HGXH100CPUNICs())
	b, err := rdma.New(n.config())
	if err != nil {
		t.Fatal(err)
	}
	n.b = b
	n.discover(ctx, t)
	vf := n.rdmaDevice(t, "mlx5_4")
	resp, err := b.Prepare(ctx, request(alloc(draName(vf), nicConfig(`{"vlan":10,"mtu":4000}`))))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if len(n.links.Changed()) == 0 {
		t.Fatal("prepare changed no link; the test proves nothing")
	}
	if err := os.Remove(filepath.Join(n.sys, "class", "infiniband", vf.Name)); err != nil {
		t.Fatal(err)
	}
	b2, err := rdma.New(n.config())
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Unprepare(ctx, claimRef, viaCheckpoint(t, resp.Devices)); err != nil {
		t.Fatalf("Unprepare: %v", err)
	}
	if c := n.links.Changed(); len(c) != 0 {
		t.Errorf("after unprepare these are not as before: %v", c)
	}
}

func TestValidateRefuses(t *testing.T) {
	const (
		ibVF  = "mlx5_12" // DGX H100
		ibPF  = "mlx5_0"
		ethVF = "mlx5_4" // cpu-nics
	)
	tests := []struct {
		name    string
		machine hardware.Machine
		device  string
		configs []json.RawMessage
		// want is what the error must contain; empty: accepted.
		want []string
	}{
		{"unknown field", hardware.HGXH100CPUNICs(), ethVF, []json.RawMessage{nicConfig(`{"vlanId":5}`)}, []string{"vf.vlanId"}},
		{"unknown top-level field", hardware.HGXH100CPUNICs(), ethVF, []json.RawMessage{json.RawMessage(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vfs":{}}`)}, []string{"vfs"}},
		{"vlan on InfiniBand", hardware.DGXH100(), ibVF, []json.RawMessage{nicConfig(`{"vlan":10}`)}, []string{"vf.vlan", "InfiniBand"}},
		{"spoofCheck on InfiniBand", hardware.DGXH100(), ibVF, []json.RawMessage{nicConfig(`{"spoofCheck":false}`)}, []string{"vf.spoofCheck"}},
		{"mtu 9000 on InfiniBand", hardware.DGXH100(), ibVF, []json.RawMessage{nicConfig(`{"mtu":9000}`)}, []string{"vf.mtu", "9000"}},
		{"maxTxRate above the port rate", hardware.HGXH100CPUNICs(), ethVF, []json.RawMessage{nicConfig(`{"maxTxRate":"401G"}`)}, []string{"vf.maxTxRate"}},
		{"maxTxRate above the A100 port rate", hardware.DGXA100(), "mlx5_10", []json.RawMessage{nicConfig(`{"maxTxRate":"300G"}`)}, []string{"vf.maxTxRate"}},
		{"vf section on a PF", hardware.DGXH100(), ibPF, []json.RawMessage{nicConfig(`{"trust":true}`)}, []string{"vf: Forbidden", "physical function"}},
		{"wrong kind", hardware.DGXH100(), ibVF, []json.RawMessage{json.RawMessage(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig"}`)}, []string{"kind", "GpuConfig", "NicConfig"}},
		{"wrong apiVersion", hardware.DGXH100(), ibVF, []json.RawMessage{json.RawMessage(`{"apiVersion":"config.strata.sh/v1","kind":"NicConfig"}`)}, []string{"apiVersion", "config.strata.sh/v1"}},
		{"bad claim config over a good class config", hardware.DGXH100(), ibVF, []json.RawMessage{nicConfig(`{"trust":true}`), nicConfig(`{"vlan":3}`)}, []string{"vf.vlan"}},
		{"unknown device", hardware.DGXH100(), "", nil, []string{"vf-0000-ff-00-1"}},

		{"vlanQoS without a VLAN in any config", hardware.HGXH100CPUNICs(), ethVF, []json.RawMessage{nicConfig(`{"trust":true}`), nicConfig(`{"vlanQoS":3}`)}, []string{"vf.vlan", "vlanQoS needs a VLAN"}},
		{"vlan on Ethernet", hardware.HGXH100CPUNICs(), ethVF, []json.RawMessage{nicConfig(`{"vlan":10,"vlanQoS":7,"spoofCheck":false}`)}, nil},
		{"VLAN from the class, priority from the claim", hardware.HGXH100CPUNICs(), ethVF, []json.RawMessage{nicConfig(`{"vlan":10}`), nicConfig(`{"vlanQoS":3}`)}, nil},
		{"port rate on Ethernet", hardware.HGXH100CPUNICs(), ethVF, []json.RawMessage{nicConfig(`{"maxTxRate":"400G"}`)}, nil},
		{"largest IPoIB MTU", hardware.DGXH100(), ibVF, []json.RawMessage{nicConfig(`{"mtu":4092}`)}, nil},
		{"no vf section on a PF", hardware.DGXH100(), ibPF, []json.RawMessage{nicConfig("")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, tc.machine)
			n.discover(ctx, t)
			device := "vf-0000-ff-00-1"
			if tc.device != "" {
				device = draName(n.rdmaDevice(t, tc.device))
			}
			a, err := allocWith(device, tc.configs...)
			decoded := err == nil
			req := request(a)
			if decoded {
				err = n.b.Validate(ctx, req)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate refused a valid config: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted it, want an error naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error %q does not mention %q", err, w)
				}
			}
			// Prepare refuses it as well, touching nothing (a config that
			// does not decode never reaches the backend).
			if !decoded {
				return
			}
			if resp, err := n.b.Prepare(ctx, req); err == nil {
				t.Errorf("Prepare accepted what Validate refused: %+v", resp)
			}
			if s := n.links.Sets(); s != 0 {
				t.Errorf("a refused claim made %d VF changes", s)
			}
		})
	}
}

func TestPrepareFailureRestoresEarlierVFs(t *testing.T) {
	tests := []struct {
		name                  string
		failSetVF, failSetMTU int
		second                string // DRA device name of the second device, "" for the machine's mlx5_8
	}{
		{name: "second SetVF fails", failSetVF: 2},
		{name: "first SetVF fails", failSetVF: 1},
		{name: "first SetMTU fails", failSetMTU: 1},
		{name: "second device unknown", second: "vf-0000-ff-00-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			n := sharedNode(t, hardware.HGXH100CPUNICs())
			links := &flakyLinks{Control: n.links, failSetVF: tc.failSetVF, failSetMTU: tc.failSetMTU}
			b, err := rdma.New(n.config(func(c *rdma.Config) { c.Links = links }))
			if err != nil {
				t.Fatal(err)
			}
			n.b = b
			n.discover(ctx, t)
			second := tc.second
			if second == "" {
				second = draName(n.rdmaDevice(t, "mlx5_8"))
			}
			req := request(
				alloc(draName(n.rdmaDevice(t, "mlx5_4")), nicConfig(`{"vlan":100,"trust":true,"mtu":9000}`)),
				alloc(second, nicConfig(`{"vlan":200,"maxTxRate":"10G"}`)),
			)
			resp, err := b.Prepare(ctx, req)
			if err == nil {
				t.Fatalf("Prepare succeeded: %+v", resp)
			}
			if tc.second != "" && !strings.Contains(err.Error(), tc.second) {
				t.Errorf("error %q does not name %s", err, tc.second)
			}
			if tc.second == "" && !strings.Contains(err.Error(), "injected") {
				t.Errorf("error %q is not the link failure", err)
			}
			if resp != nil {
				t.Errorf("a failed Prepare returned %+v", resp)
			}
			if links.setVF == 0 {
				t.Fatal("no SetVF was attempted; the test proves nothing")
			}
			if c := n.links.Changed(); len(c) != 0 {
				t.Errorf("after a failed prepare these are not at defaults: %v", c)
			}
		})
	}
}
