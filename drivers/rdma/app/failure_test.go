package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/linkmock"
	"github.com/strata-sh/strata/internal/linkctl"
)

// failingLinks fails the VF change of one interface, as the kernel does
// when the PF driver refuses a setting.
type failingLinks struct {
	*linkmock.Links
	mu     sync.Mutex
	failOn string
}

func (l *failingLinks) SetVF(pf string, vf int, s linkctl.VFState) error {
	l.mu.Lock()
	fail := fmt.Sprintf("%s vf %d", pf, vf) == l.failOn
	l.mu.Unlock()
	if fail {
		return errors.New("injected: operation not permitted")
	}
	return l.Links.SetVF(pf, vf, s)
}

// TestFailedPrepareKeepsOperatorSettings: an operator configured two VFs
// (trust on, spoof check off, MTU 9000) outside Strata; a claim for both
// with settings of its own fails on the second. The plugin, core and
// backend together, leaves both VFs exactly as the operator set them:
// the first put back from what the backend recorded before changing it,
// the second never touched, and neither reset to the kernel's defaults.
func TestFailedPrepareKeepsOperatorSettings(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root, err := os.MkdirTemp("", "strata-rdma-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	m := hardware.HGXH100CPUNICs()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	var vfs []hardware.RDMADevice
	pfNetdev := map[string]string{}
	for _, d := range m.RDMADevices() {
		if d.PF == "" {
			pfNetdev[d.BusID] = d.NetDev
		} else if len(vfs) < 2 && (len(vfs) == 0 || d.PF != vfs[0].PF) {
			vfs = append(vfs, d)
		}
	}
	if len(vfs) != 2 {
		t.Fatalf("the machine has VFs %v, want two on different PFs", vfs)
	}
	links := &failingLinks{Links: linkmock.New(m)}
	operator := linkctl.VFState{Trust: true, SpoofCheck: false}
	for _, vf := range vfs {
		if err := links.Links.SetVF(pfNetdev[vf.PF], vf.VFIndex, operator); err != nil {
			t.Fatal(err)
		}
		if err := links.SetMTU(vf.NetDev, 9000); err != nil {
			t.Fatal(err)
		}
	}
	links.failOn = fmt.Sprintf("%s vf %d", pfNetdev[vfs[1].PF], vfs[1].VFIndex)

	o := NewOptions()
	o.NodeName, o.NodeUID, o.PodUID = "node-a", "node-a-uid", "pod"
	o.PluginDataDir = filepath.Join(root, "plugin")
	o.RegistrarDir = filepath.Join(root, "registry")
	o.CDIDir = filepath.Join(root, "cdi")
	o.SysfsRoot, o.DevRoot = filepath.Join(root, hardware.SysDir), root
	o.BootIDPath = filepath.Join(root, hardware.BootIDFile)
	o.MetricsAddress = ""
	d, err := Start(ctx, o, fake.NewClientset(), Host{Links: links})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)

	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "two-vfs", UID: types.UID("uid-two")},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Config: []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: rdma.DriverName,
					Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"vlan":100,"mtu":4000}}`)}}}}},
		}}}}
	for i, vf := range vfs {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("nic-%d", i), Driver: rdma.DriverName, Pool: "node-a", Device: vfName(vf)})
	}
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatal(err)
	}
	if res[claim.UID].Err == nil {
		t.Fatal("the prepare succeeded; the injected failure did not happen")
	}
	for _, vf := range vfs {
		state, mtu := links.State(pfNetdev[vf.PF], vf.VFIndex, vf.NetDev)
		if state != operator || mtu != 9000 {
			t.Errorf("VF %s after the failed prepare: %+v with MTU %d, want the operator's %+v with MTU 9000", vf.Name, state, mtu, operator)
		}
	}
}

// vfName is the DRA device name of a VF: its PCI address with ':' and
// '.' turned into '-'.
func vfName(d hardware.RDMADevice) string {
	return "vf-" + strings.NewReplacer(":", "-", ".", "-").Replace(d.BusID)
}
