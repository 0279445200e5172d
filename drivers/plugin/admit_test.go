package plugin

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// sharedGPU is a device that allows multiple allocations, with 80Gi of
// memory, consuming the counters of its physical GPU.
func sharedGPU(name string) resourceapi.Device {
	return resourceapi.Device{
		Name:                     name,
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("80Gi")},
			"cores":  {Value: resource.MustParse("100")},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters",
			Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}},
	}
}

// migSlice is an exclusive partition consuming memory of the same GPU.
func migSlice(name, memory string) resourceapi.Device {
	return resourceapi.Device{
		Name: name,
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters",
			Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}}}},
	}
}

// shareClaim allocates device with a share ID and the consumed capacity
// given as name=quantity pairs, as kube-scheduler records it.
func shareClaim(uid, name, device string, consumed ...string) *resourceapi.ResourceClaim {
	c := allocatedClaim(uid, name, device)
	r := &c.Status.Allocation.Devices.Results[0]
	r.Pool = "TestAdmit"
	r.ShareID = ptr.To(types.UID("share-" + uid))
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
	for _, kv := range consumed {
		k, v, _ := strings.Cut(kv, "=")
		r.ConsumedCapacity[resourceapi.QualifiedName(k)] = resource.MustParse(v)
	}
	return c
}

func wholeClaim(uid, name string, devices ...string) *resourceapi.ResourceClaim {
	c := allocatedClaim(uid, name, devices...)
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].Pool = "TestAdmit"
	}
	return c
}

func TestAdmit(t *testing.T) {
	counters := []resourceapi.CounterSet{{Name: "gpu-0-counters",
		Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}}
	devices := []resourceapi.Device{sharedGPU("gpu-0"), migSlice("gpu-0-mig-a", "40Gi"), migSlice("gpu-0-mig-b", "40Gi"), {Name: "nic-0"}}
	admin := func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		c.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
		return c
	}
	for _, tc := range []struct {
		name string
		// prepared are prepared in order and must succeed.
		prepared []*resourceapi.ResourceClaim
		claim    *resourceapi.ResourceClaim
		// refused is what the error must say; "" for admitted.
		refused string
	}{{
		name:     "two whole-GPU shares of one GPU",
		prepared: []*resourceapi.ResourceClaim{shareClaim("a", "first", "gpu-0", "memory=80Gi", "cores=100")},
		claim:    shareClaim("b", "second", "gpu-0", "memory=80Gi", "cores=100"),
		refused:  "refusing to over-commit device gpu-0: capacity cores is 100, the claims on it would consume 200 (100 by ns/first, 100 by ns/second)",
	}, {
		name:     "two halves of one GPU",
		prepared: []*resourceapi.ResourceClaim{shareClaim("a", "first", "gpu-0", "memory=40Gi", "cores=50")},
		claim:    shareClaim("b", "second", "gpu-0", "memory=40Gi", "cores=50"),
	}, {
		name: "a third share past the cores",
		prepared: []*resourceapi.ResourceClaim{
			shareClaim("a", "first", "gpu-0", "memory=10Gi", "cores=60"),
			shareClaim("b", "second", "gpu-0", "memory=10Gi", "cores=30"),
		},
		claim:   shareClaim("c", "third", "gpu-0", "memory=10Gi", "cores=20"),
		refused: "capacity cores is 100, the claims on it would consume 110",
	}, {
		name:     "an exclusive device twice",
		prepared: []*resourceapi.ResourceClaim{wholeClaim("a", "first", "nic-0")},
		claim:    wholeClaim("b", "second", "nic-0"),
		refused:  "refusing to over-commit device nic-0: it is already prepared for claim ns/first",
	}, {
		name:     "a MIG slice beside a share of its GPU",
		prepared: []*resourceapi.ResourceClaim{shareClaim("a", "first", "gpu-0", "memory=10Gi", "cores=10")},
		claim:    wholeClaim("b", "second", "gpu-0-mig-a"),
		refused:  "refusing to over-commit counter set gpu-0-counters: counter memory is 80Gi, the devices in use would consume 120Gi (gpu-0, gpu-0-mig-a)",
	}, {
		name:     "a second share of a GPU whose counters are taken counts them once",
		prepared: []*resourceapi.ResourceClaim{shareClaim("a", "first", "gpu-0", "memory=10Gi", "cores=10")},
		claim:    shareClaim("b", "second", "gpu-0", "memory=10Gi", "cores=10"),
	}, {
		name:     "two MIG slices that fit",
		prepared: []*resourceapi.ResourceClaim{wholeClaim("a", "first", "gpu-0-mig-a")},
		claim:    wholeClaim("b", "second", "gpu-0-mig-b"),
	}, {
		name:     "admin access consumes nothing",
		prepared: []*resourceapi.ResourceClaim{wholeClaim("a", "first", "nic-0")},
		claim:    admin(wholeClaim("b", "monitor", "nic-0")),
	}, {
		name:    "one claim with the same device twice",
		claim:   wholeClaim("b", "twice", "nic-0", "nic-0"),
		refused: "device nic-0: it is already prepared for claim ns/twice",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			backend := &fakeBackend{devices: devices, counters: counters}
			d := newTestDriverOn(t, "TestAdmit", t.TempDir(), backend, "boot-1")
			events := d.recorder.(*record.FakeRecorder).Events
			for _, c := range tc.prepared {
				if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); res[c.UID].Err != nil {
					t.Fatalf("prepare %s: %v", c.Name, res[c.UID].Err)
				}
			}
			res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{tc.claim})
			if err != nil {
				t.Fatal(err)
			}
			got := res[tc.claim.UID].Err
			if tc.refused == "" {
				if got != nil {
					t.Fatalf("prepare refused: %v", got)
				}
				return
			}
			if got == nil || !strings.Contains(got.Error(), tc.refused) {
				t.Fatalf("prepare error = %v, want one saying %q", got, tc.refused)
			}
			if _, ok := d.state.Claims[tc.claim.UID]; ok {
				t.Errorf("refused claim left a checkpoint entry")
			}
			if _, ok := backend.prepared[tc.claim.UID]; ok {
				t.Errorf("backend prepared the refused claim")
			}
			select {
			case e := <-events:
				if !strings.Contains(e, "Warning "+OverCommitReason) || !strings.Contains(e, tc.refused) {
					t.Errorf("event %q, want a %s warning with the reason", e, OverCommitReason)
				}
			default:
				t.Errorf("no event posted for the refused claim")
			}
		})
	}
}

// TestAdmitCountsClaimsOfTheCheckpoint shows that what the node counts is
// what the checkpoint holds, written by any instance: a claim prepared by
// another instance of the plugin is counted after a restart.
func TestAdmitCountsClaimsOfTheCheckpoint(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	backend := &fakeBackend{devices: []resourceapi.Device{sharedGPU("gpu-0")}}
	first := newTestDriverOn(t, "TestAdmit", dir, backend, "boot-1")
	if res, _ := first.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{shareClaim("a", "first", "gpu-0", "memory=60Gi")}); res["a"].Err != nil {
		t.Fatal(res["a"].Err)
	}
	second := newTestDriverOn(t, "TestAdmit", dir, backend, "boot-1")
	res, _ := second.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{shareClaim("b", "second", "gpu-0", "memory=30Gi")})
	if err := res["b"].Err; err == nil || !strings.Contains(err.Error(), "would consume 90Gi (60Gi by ns/first, 30Gi by ns/second)") {
		t.Fatalf("prepare error = %v, want the over-commit counted with the checkpoint's claim", err)
	}
}
