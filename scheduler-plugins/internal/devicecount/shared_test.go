package devicecount_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
)

// sharingManager is a DRA manager whose claim tracker hands out one
// state until it is told of a change, and says so.
type sharingManager struct {
	fwk.SharedDRAManager
	tracker *sharingTracker
}

func (m sharingManager) ResourceClaims() fwk.ResourceClaimTracker { return m.tracker }

type sharingTracker struct {
	fwk.ResourceClaimTracker
	state        *structured.AllocatedState
	gathers      int
	lists        int
	sharesStates bool
}

func (t *sharingTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	t.gathers++
	return t.state, nil
}

func (t *sharingTracker) List() ([]*resourceapi.ResourceClaim, error) {
	t.lists++
	return nil, nil
}

func (t *sharingTracker) SharesAllocatedState() bool { return t.sharesStates }

// With a DRA manager that hands out a shared state, the tracker reads it
// on every call, never walks the claims (even with every device shared),
// hands each state on as it is, and lays out only what changed.
func TestAllocatedReadsASharedState(t *testing.T) {
	gpu := structured.MakeDeviceID("gpu.example.com", "node-0", "gpu-0")
	stateOf := func(cores int64) *structured.AllocatedState {
		return &structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity: structured.ConsumedCapacityCollection{gpu: structured.NewDeviceConsumedCapacity(gpu,
				map[resourceapi.QualifiedName]resource.Quantity{"cores": *resource.NewQuantity(cores, resource.DecimalSI)}).ConsumedCapacity},
		}
	}
	tracker := &sharingTracker{state: stateOf(30), sharesStates: true}
	a := devicecount.NewAllocated(sharingManager{tracker: tracker}, true)
	devicecount.SetWalkFrom(a, 1)
	first, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	if first != again || first.AllocatedState != tracker.state {
		t.Error("the tracker made two snapshots of one shared state, or did not hand it on")
	}
	tracker.state = stateOf(50)
	next, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := next.ConsumedMilli(gpu, "cores"); !ok || got != 50000 {
		t.Errorf("after a change the tracker says the GPU has %d milli-cores consumed, want 50 cores", got)
	}
	if got, _ := first.ConsumedMilli(gpu, "cores"); got != 30000 {
		t.Errorf("the earlier state changed to %d milli-cores consumed", got)
	}
	if _, ok := next.ConsumedMilli(gpu, "memory"); ok {
		t.Error("the tracker says the GPU's memory is consumed, which no claim consumes")
	}
	// A device whose consumed capacity is gone consumes nothing; one
	// that another claim took whole is held.
	gone := stateOf(0)
	delete(gone.AggregatedCapacity, gpu)
	gone.AllocatedDevices.Insert(gpu)
	tracker.state = gone
	last, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := last.ConsumedMilli(gpu, "cores"); ok {
		t.Errorf("the tracker says a device without consumed capacity has %d milli-cores consumed", got)
	}
	if !last.AllocatedDevices.Has(gpu) {
		t.Error("the device held whole is not in the state")
	}
	if got, _ := next.ConsumedMilli(gpu, "cores"); got != 50000 {
		t.Errorf("the earlier state changed to %d milli-cores consumed", got)
	}
	if tracker.gathers != 4 || tracker.lists != 0 || devicecount.Walking(a) {
		t.Errorf("%d reads of the manager's state and %d lists of claims (walking: %v), want 4 and none", tracker.gathers, tracker.lists, devicecount.Walking(a))
	}

	// A manager that does not say it shares its state is walked when
	// shares are most of what is held.
	tracker = &sharingTracker{state: stateOf(30)}
	a = devicecount.NewAllocated(sharingManager{tracker: tracker}, true)
	devicecount.SetWalkFrom(a, 1)
	if _, err := a.State(); err != nil {
		t.Fatal(err)
	}
	if tracker.lists == 0 {
		t.Error("the tracker did not walk the claims of a manager that copies its state")
	}
}
