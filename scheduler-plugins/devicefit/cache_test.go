package devicefit

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// A random sequence of slice and claim events fed to the plugin's index:
// after each, the counts Filter reads for every node (cached across
// events) are those of a plugin that counts from nothing, on an index
// built from every object that exists then.
func TestCachedCountsAgreeWithARecount(t *testing.T) {
	ctx := t.Context()
	p, dra, _ := newPlugin(t, classes()...)
	rng := rand.New(rand.NewPCG(3, 5))
	var reqs []requirement
	for i, claim := range []*resourceapi.ResourceClaim{
		testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "one"),
		testutil.MakeClaimSpec().Request("gpu", gpuClass, 2).Claim("default", "two"),
		testutil.MakeClaimSpec().Request("gpu", gpuClass, 1, `device.attributes["nvidia.strata.sh"].productName == "T4"`).Claim("default", "t4"),
		testutil.MakeClaimSpec().Request("gpu", sharedClass, 1).Capacity(map[string]string{"cores": "30", "memory": "4Gi"}).Claim("default", "share"),
	} {
		r, err := p.requirement(claim.Name, claim.Spec.Devices.Requests[0])
		if err != nil {
			t.Fatal(err)
		}
		r.claim = fmt.Sprint(i)
		reqs = append(reqs, r)
	}
	nodes := []string{"n0", "n1", "n2"}
	sliceObjs := map[string]*resourceapi.ResourceSlice{}
	claims := map[types.UID]*resourceapi.ResourceClaim{}
	rv := 0
	for step := range 400 {
		node := nodes[rng.IntN(len(nodes))]
		switch rng.IntN(5) {
		case 0: // the node's slice published again, maybe with other GPUs
			var s *resourceapi.ResourceSlice
			if rng.IntN(2) == 0 {
				s = dct.GPUSlice(node, 1+rng.IntN(4))
			} else {
				s = sharedSlice(node, 1+rng.IntN(4), []string{"T4", "A10"}[rng.IntN(2)])
			}
			rv++
			s.ResourceVersion = fmt.Sprint(rv)
			p.index.SetSlice(sliceObjs[s.Name], s)
			sliceObjs[s.Name] = s
		case 1: // the node's slice deleted
			name := node + "-gpus"
			if old := sliceObjs[name]; old != nil {
				p.index.SetSlice(old, nil)
				delete(sliceObjs, name)
			}
		case 2, 3: // a claim allocated a GPU of the node, whole or shared
			name := fmt.Sprintf("c%d", rng.IntN(12))
			var c *resourceapi.ResourceClaim
			if rng.IntN(2) == 0 {
				c = dct.Allocate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", name), node, rng.IntN(4))
			} else {
				c = share(name, node, rng.IntN(4), fmt.Sprint(10*(1+rng.IntN(5))), fmt.Sprintf("%dGi", 1+rng.IntN(6)))
			}
			c.UID = types.UID(name)
			if old := claims[c.UID]; old != nil {
				p.index.DeleteClaim(old.UID) // deallocated, then allocated again
			}
			p.index.SetClaim(c)
			claims[c.UID] = c
		case 4: // a claim deleted
			uid := types.UID(fmt.Sprintf("c%d", rng.IntN(12)))
			p.index.DeleteClaim(uid)
			delete(claims, uid)
		}

		fresh := devicecount.NewIndex(features.EnableDRAConsumableCapacity)
		for _, s := range sliceObjs {
			fresh.SetSlice(nil, s)
		}
		for _, c := range claims {
			fresh.SetClaim(c)
		}
		recount := &Plugin{dra: dra, enabled: true, consumable: p.consumable, cel: cel.NewCache(8, cel.Features{EnableConsumableCapacity: true}), matches: map[string]*sliceMatches{}, index: fresh}
		// Each step checks a few of the shapes, so that cached counts of
		// the others grow stale in between.
		picked := slices.Collect(maps.Keys(map[int]bool{rng.IntN(len(reqs)): true, rng.IntN(len(reqs)): true}))
		var some []requirement
		for _, i := range picked {
			some = append(some, reqs[i])
		}
		c := p.prepare(ctx, some)
		for _, node := range nodes {
			got := make([]int64, c.offset[len(c.reqs)])
			want := make([]int64, len(got))
			p.cachedCounts(ctx, c, node, got)
			recount.countNode(ctx, c, node, want, nil, nil)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("step %d, node %s, requests %v: cached counts differ from a recount (-want +got):\n%s", step, node, picked, diff)
			}
		}
	}
}

// An allocation in flight (reserved for a pod being bound, not yet
// written) holds its device for the next pods, as DynamicResources
// counts it; once it is gone, the device is free again.
func TestAllocationInFlightHoldsTheDevice(t *testing.T) {
	a := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "a")
	b := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "b")
	a.UID, b.UID = "a", "b"
	p, dra, _ := newPlugin(t, append(classes(), dct.GPUSlice("one", 1), a, b)...)
	nodes := nodeInfos("one")
	if got, _ := verdicts(t, p, podWith(a), nodes); !got["one"].IsSuccess() {
		t.Fatalf("the free GPU was turned away: %v", got["one"])
	}
	// DynamicResources' Reserve for a's pod.
	if err := dra.ResourceClaims().SignalClaimPendingAllocation(a.UID, dct.Allocate(a, "one", 0)); err != nil {
		t.Fatal(err)
	}
	if got, _ := verdicts(t, p, podWith(b), nodes); got["one"].IsSuccess() {
		t.Error("the GPU allocated in flight to a was offered to b")
	}
	// a's binding failed: Unreserve.
	dra.ResourceClaims().MaybeRemoveClaimPendingAllocation(a.UID, true)
	if got, _ := verdicts(t, p, podWith(b), nodes); !got["one"].IsSuccess() {
		t.Errorf("the GPU freed by Unreserve was turned away: %v", got["one"])
	}
}

// The index can hold a claim the scheduler's claim cache no longer shows
// allocated (the informer delivers the two in either order): a node is
// never turned away for it.
func TestDeviceHeldOnlyInTheIndexDoesNotTurnANodeAway(t *testing.T) {
	pending := testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "pending")
	p, _, _ := newPlugin(t, append(classes(), dct.GPUSlice("one", 1), pending)...)
	gone := dct.Allocate(testutil.MakeClaimSpec().Request("gpu", gpuClass, 1).Claim("default", "gone"), "one", 0)
	p.index.SetClaim(gone)
	if got, _ := verdicts(t, p, podWith(pending), nodeInfos("one")); !got["one"].IsSuccess() {
		t.Errorf("a GPU held by a claim the scheduler does not have turned the node away: %v", got["one"])
	}
}
