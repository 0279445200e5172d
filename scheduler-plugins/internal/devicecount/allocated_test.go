package devicecount_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// The tracker's state is the DRA manager's own GatherAllocatedState
// through a random run of claim changes: whole devices and shares
// allocated, allocations in flight and then written or given up, admin
// access, claims deallocated and deleted. A state handed out earlier
// does not change afterwards. The bar for walking the claims moves
// between low and out of reach every ten steps, so that each run
// switches between walking them and copying the DRA manager's state,
// both ways, with claims in every state.
func TestAllocatedFollowsTheClaims(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { allocatedFollowsTheClaims(t, seed) })
	}
}

func allocatedFollowsTheClaims(t *testing.T, seed uint64) {
	_, ctx := ktesting.NewTestContext(t)
	m, client := dct.DRAManagerAndClient(ctx, t, dct.GPUSlice("node-a", 8), dct.GPUSlice("node-b", 8))
	consumable := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate).EnableDRAConsumableCapacity
	if !consumable {
		t.Fatal("DRAConsumableCapacity is off: the shares would not be tracked as shares")
	}
	tracker := devicecount.NewAllocated(m, consumable)
	walked, copiedAfterWalk := false, false
	claims := client.ResourceV1().ResourceClaims("default")
	rng := rand.New(rand.NewPCG(seed, 14))

	version := 0
	write := func(c *resourceapi.ResourceClaim, create bool) {
		t.Helper()
		version++
		c.ResourceVersion = strconv.Itoa(version)
		var err error
		if create {
			_, err = claims.Create(ctx, c, metav1.CreateOptions{})
		} else {
			_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// A whole GPU or a share of one, on either node. The allocator never
	// gives out a device held whole, nor shares of one, nor a device held
	// in shares whole: neither does the run (a device held twice whole
	// is freed by the first holder's release, in an order the tracker
	// cannot know).
	wholeGPU, shares, holds := map[string]bool{}, map[string]int{}, map[string]string{}
	release := func(name string) {
		if gpu, ok := holds[name]; ok {
			delete(holds, name)
			if wholeGPU[gpu] {
				delete(wholeGPU, gpu)
			} else {
				shares[gpu]--
			}
		}
	}
	allocate := func(c *resourceapi.ResourceClaim, i int) *resourceapi.ResourceClaim {
		kind := rng.IntN(8) // 0-2 whole, 3-5 share, 6 admin access, 7 share of nothing
		var node string
		var gpu int
		for try := 0; ; try++ {
			if try == 64 {
				kind = 6 // every GPU is taken
			}
			node, gpu = []string{"node-a", "node-b"}[rng.IntN(2)], rng.IntN(8)
			key := fmt.Sprintf("%s/%d", node, gpu)
			if kind == 6 || !wholeGPU[key] && (kind > 2 || shares[key] == 0) {
				switch {
				case kind <= 2:
					wholeGPU[key] = true
					holds[c.Name] = key
				case kind != 6:
					shares[key]++
					holds[c.Name] = key
				}
				break
			}
		}
		a := dct.Allocate(c, node, gpu)
		r := &a.Status.Allocation.Devices.Results[0]
		switch {
		case kind == 6:
			r.AdminAccess = ptr.To(true)
		case kind == 7:
			// A share that consumes nothing still marks its device.
			r.ShareID = ptr.To(types.UID(fmt.Sprintf("share-%d", i)))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"cores": *resource.NewQuantity(0, resource.DecimalSI)}
		case kind > 2:
			r.ShareID = ptr.To(types.UID(fmt.Sprintf("share-%d", i)))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
				"cores":  *resource.NewQuantity(int64(1+rng.IntN(50)), resource.DecimalSI),
				"memory": *resource.NewQuantity(int64(1+rng.IntN(8))<<30, resource.BinarySI),
			}
		}
		return a
	}

	var live []*resourceapi.ResourceClaim
	var inFlight []*resourceapi.ResourceClaim
	prev, err := tracker.State()
	if err != nil {
		t.Fatal(err)
	}
	for step := range 120 {
		if step%20 == 0 {
			devicecount.SetWalkFrom(tracker, 2)
		} else if step%20 == 10 {
			devicecount.SetWalkFrom(tracker, 1000)
		}
		old, oldDesc := prev, describe(prev.AllocatedState)
		var what string
		switch op := rng.IntN(6); {
		case op <= 1 || len(live) == 0:
			c := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", fmt.Sprintf("claim-%d", step))
			c.UID = types.UID(c.Name)
			write(allocate(c, step), true)
			live = append(live, c)
			what = "allocated " + c.Name
		case op == 2:
			c := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", fmt.Sprintf("claim-%d", step))
			c.UID = types.UID(c.Name)
			write(c, true)
			live = append(live, c)
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				_, err := m.ResourceClaims().Get(c.Namespace, c.Name)
				return err == nil, nil
			}); err != nil {
				t.Fatalf("the DRA manager did not see claim %s: %v", c.Name, err)
			}
			if err := m.ResourceClaims().SignalClaimPendingAllocation(c.UID, allocate(c, step)); err != nil {
				t.Fatal(err)
			}
			inFlight = append(inFlight, c)
			what = "put " + c.Name + " in flight"
		case op == 3 && len(inFlight) > 0:
			c := inFlight[0]
			inFlight = inFlight[1:]
			if rng.IntN(2) == 0 {
				// Written, as PreBind does, then no longer in flight.
				a := c.DeepCopy()
				a.Status.Allocation = m.ResourceClaims().GetPendingAllocation(c.UID)
				write(a, false)
				what = "wrote " + c.Name
			} else {
				release(c.Name)
				what = "gave up " + c.Name
			}
			m.ResourceClaims().MaybeRemoveClaimPendingAllocation(c.UID, true)
		case op == 4:
			i := rng.IntN(len(live))
			c := live[i].DeepCopy()
			if slices.ContainsFunc(inFlight, func(f *resourceapi.ResourceClaim) bool { return f.UID == c.UID }) {
				continue
			}
			c.Status.Allocation = nil
			write(c, false)
			release(c.Name)
			what = "deallocated " + c.Name
		default:
			i := rng.IntN(len(live))
			c := live[i]
			if slices.ContainsFunc(inFlight, func(f *resourceapi.ResourceClaim) bool { return f.UID == c.UID }) {
				continue
			}
			if err := claims.Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			live = slices.Delete(live, i, i+1)
			release(c.Name)
			what = "deleted " + c.Name
		}
		t.Logf("step %d: %s", step, what)
		prev = agreed(ctx, t, tracker, m, fmt.Sprintf("step %d (%s)", step, what))
		if devicecount.Walking(tracker) {
			walked = true
		} else if walked {
			copiedAfterWalk = true
		}
		if diff := cmp.Diff(consumedOf(prev.AllocatedState), milliOf(prev)); diff != "" {
			t.Fatalf("step %d (%s): Milli differs from AggregatedCapacity (-consumed +milli):\n%s", step, what, diff)
		}
		if diff := cmp.Diff(oldDesc, describe(old.AllocatedState)); diff != "" {
			t.Fatalf("step %d (%s): the state handed out before changed (-before +after):\n%s", step, what, diff)
		}
	}
	if len(live) == 0 {
		t.Fatal("the run ended with no claims: it exercised little")
	}
	if !walked || !copiedAfterWalk {
		t.Fatalf("the tracker walked the claims: %v, copied after walking: %v; the run should have done both", walked, copiedAfterWalk)
	}
}

// agreed waits until the tracker's state is GatherAllocatedState's and
// returns it; it fails the test, naming when, if they still differ after
// ten seconds.
func agreed(ctx context.Context, t *testing.T, tracker *devicecount.Allocated, m fwk.SharedDRAManager, when string) *devicecount.Snapshot {
	t.Helper()
	var state *devicecount.Snapshot
	var got, want map[string]string
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s, err := tracker.State()
		if err != nil {
			return false, err
		}
		w, err := m.ResourceClaims().GatherAllocatedState()
		if err != nil {
			return false, nil // changed while gathering
		}
		state, got, want = s, describe(s.AllocatedState), describe(w)
		return cmp.Equal(want, got), nil
	}); err != nil {
		t.Fatalf("%s: the tracker's state differs from GatherAllocatedState's (-want +got):\n%s", when, cmp.Diff(want, got))
	}
	return state
}

// consumedOf and milliOf flatten what a state's claims consume, from
// its consumed capacity and from its milli-unit view.
func consumedOf(s *structured.AllocatedState) map[string]string {
	out := describe(s)
	for k := range out {
		if !strings.HasSuffix(k, " consumes") {
			delete(out, k)
		}
	}
	return out
}

func milliOf(s *devicecount.Snapshot) map[string]string {
	out := map[string]string{}
	for id, used := range s.Milli {
		var parts []string
		for _, u := range used {
			parts = append(parts, fmt.Sprintf("%s=%d", u.Name, u.Milli))
		}
		slices.Sort(parts)
		out[id.String()+" consumes"] = fmt.Sprint(parts)
	}
	return out
}

// describe flattens an allocated state: each device or share, with what
// it consumes. A device whose claims consume nothing has no entry: the
// DRA manager keeps one of zeros or none depending on the order in which
// it saw the claims, and the allocator reads both alike.
func describe(s *structured.AllocatedState) map[string]string {
	out := map[string]string{}
	for id := range s.AllocatedDevices {
		out[id.String()] = "whole"
	}
	for id := range s.AllocatedSharedDeviceIDs {
		out[id.String()] = "share"
	}
	for id, used := range s.AggregatedCapacity {
		if used.Empty() {
			continue
		}
		var parts []string
		for name, q := range used {
			parts = append(parts, fmt.Sprintf("%s=%d", name, q.MilliValue()))
		}
		slices.Sort(parts)
		out[id.String()+" consumes"] = fmt.Sprint(parts)
	}
	return out
}

// A device freed by one claim and given whole to another between two
// walks is held after the second walk, whichever of the two claims the
// walk meets first. The claims are listed in no fixed order, so the run
// repeats the hand-over, with both a release and a deletion.
func TestAllocatedHandsOverInOneWalk(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, client := dct.DRAManagerAndClient(ctx, t, dct.GPUSlice("node-a", 8), dct.GPUSlice("node-b", 8))
	tracker := devicecount.NewAllocated(m, true)
	devicecount.SetWalkFrom(tracker, 2)
	claims := client.ResourceV1().ResourceClaims("default")
	version := 0
	create := func(name string, gpu int, share bool) *resourceapi.ResourceClaim {
		t.Helper()
		c := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", name)
		c.UID = types.UID(name)
		node := "node-a"
		if share {
			node = "node-b"
		}
		a := dct.Allocate(c, node, gpu)
		if share {
			r := &a.Status.Allocation.Devices.Results[0]
			r.ShareID = ptr.To(types.UID("share-" + name))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"cores": *resource.NewQuantity(10, resource.DecimalSI)}
		}
		version++
		a.ResourceVersion = strconv.Itoa(version)
		if _, err := claims.Create(ctx, a, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	// seen waits until the DRA manager's cache holds the claim as given,
	// or no longer holds it.
	seen := func(c *resourceapi.ResourceClaim, gone bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got, err := m.ResourceClaims().Get(c.Namespace, c.Name)
			if gone {
				return err != nil, nil
			}
			return err == nil && got.ResourceVersion == c.ResourceVersion, nil
		}); err != nil {
			t.Fatalf("the DRA manager did not see claim %s as written: %v", c.Name, err)
		}
	}
	// The cache already holds every change when same runs, so the
	// tracker's state is final; the DRA manager's own bookkeeping, done
	// by its handlers after the cache has the claim, may lag.
	same := func(round int) { t.Helper(); agreed(ctx, t, tracker, m, fmt.Sprintf("round %d", round)) }
	seen(create("share-0", 0, true), false)
	seen(create("share-1", 1, true), false)
	holder := create("holder-0", 0, false)
	seen(holder, false)
	same(0)
	if !devicecount.Walking(tracker) {
		t.Fatal("the tracker copies the DRA manager's state: the test needs it to walk the claims")
	}
	for round := 1; round <= 16; round++ {
		if round%2 == 0 {
			if err := claims.Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			seen(holder, true)
		} else {
			freed := holder.DeepCopy()
			freed.Status.Allocation = nil
			version++
			freed.ResourceVersion = strconv.Itoa(version)
			if _, err := claims.UpdateStatus(ctx, freed, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			seen(freed, false)
		}
		holder = create(fmt.Sprintf("holder-%d", round), 0, false)
		seen(holder, false)
		same(round)
		if !devicecount.Walking(tracker) {
			t.Fatalf("round %d: the tracker stopped walking the claims", round)
		}
	}
}
