package plugin

import (
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
