package plugin

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// TestMarkSimulated: every published device of a simulated plugin says
// so, and the backend's inventory is left as it was.
func TestMarkSimulated(t *testing.T) {
	inv := &Inventory{Devices: []resourceapi.Device{
		{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("H100")}}},
		{Name: "gpu-1"},
	}}
	res, err := driverResources("node-a", inv)
	if err != nil {
		t.Fatal(err)
	}
	markSimulated(res)
	n := 0
	for _, s := range res.Pools["node-a"].Slices {
		for _, d := range s.Devices {
			n++
			if v := d.Attributes[SimulatedAttribute].BoolValue; v == nil || !*v {
				t.Errorf("device %s has no %s: true", d.Name, SimulatedAttribute)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d devices published, want 2", n)
	}
	if _, ok := inv.Devices[0].Attributes[SimulatedAttribute]; ok {
		t.Error("marking the slices changed the backend's inventory")
	}
}

// TestSocketPathsThatDoNotFit: a registrar or data folder whose socket
// would not fit a unix socket path is refused naming the flag, including
// a rolling-update registration socket of exactly 108 bytes, which the
// helper's own check lets through.
func TestSocketPathsThatDoNotFit(t *testing.T) {
	const uid = "0123456789abcdef0123456789abcdef"
	// A folder that makes "<dir>/nvidia.strata.sh-<uid>-reg.sock" exactly
	// 108 bytes.
	dir := "/r" + strings.Repeat("x", 108-len("/r")-len("/nvidia.strata.sh-"+uid+"-reg.sock"))
	cfg := Config{DriverName: "nvidia.strata.sh", RegistrarDir: dir, PluginDataDir: "/var/lib/kubelet/plugins/nvidia.strata.sh", RollingUpdateUID: uid}
	err := cfg.checkSocketPaths()
	if err == nil || !strings.Contains(err.Error(), "--registrar-dir") || !strings.Contains(err.Error(), "108 bytes") {
		t.Errorf("a 108-byte registration socket: %v, want a refusal naming --registrar-dir", err)
	}
	cfg.RegistrarDir = "/var/lib/kubelet/plugins_registry"
	if err := cfg.checkSocketPaths(); err != nil {
		t.Errorf("the kubelet's default folders: %v", err)
	}
	cfg.PluginDataDir = "/" + strings.Repeat("d", 100)
	if err := cfg.checkSocketPaths(); err == nil || !strings.Contains(err.Error(), "--plugin-data-dir") {
		t.Errorf("a long data folder: %v, want a refusal naming --plugin-data-dir", err)
	}
}
