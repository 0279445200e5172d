package replay

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"
)

// stateView is an allocated state in comparable form: consumed capacity
// in milli-units.
type stateView struct {
	Whole    []string
	Shares   []string
	Consumed map[string]map[string]int64
}

func viewOf(s *structured.AllocatedState) stateView {
	v := stateView{Consumed: map[string]map[string]int64{}}
	for id := range s.AllocatedDevices {
		v.Whole = append(v.Whole, id.String())
	}
	for id := range s.AllocatedSharedDeviceIDs {
		v.Shares = append(v.Shares, id.String())
	}
	for id, c := range s.AggregatedCapacity {
		m := map[string]int64{}
		for name, q := range c {
			m[string(name)] = q.MilliValue()
		}
		v.Consumed[id.String()] = m
	}
	return v
}

// withoutCoveredShares is kube-scheduler's state as the replay's manager
// hands it out: the IDs of shares whose device has consumed capacity
// recorded left out.
func withoutCoveredShares(s *structured.AllocatedState) *structured.AllocatedState {
	out := *s
	out.AllocatedSharedDeviceIDs = s.AllocatedSharedDeviceIDs.Clone()
	for id := range out.AllocatedSharedDeviceIDs {
		if _, ok := s.AggregatedCapacity[id.GetDeviceID()]; ok {
			out.AllocatedSharedDeviceIDs.Delete(id)
		}
	}
	return &out
}

var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })

// The replay's DRA manager hands the allocator kube-scheduler's state
// after every change of claims, whole devices, shares with and without
// consumed capacity, shares that consume nothing and admin access mixed,
// and a state handed out stays as it was when claims change later.
func TestDRAManagerStateIsKubeSchedulers(t *testing.T) {
	ctx := testContext(t)
	logger := klog.FromContext(ctx)
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			claimCache := assumecache.NewAssumeCache(logger, nil, "ResourceClaim", "", nil)
			factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
			upstream := dynamicresources.NewDRAManager(ctx, claimCache, nil, factory)
			m := newDRAManager(upstream, claimCache)
			g := newClaimGen(seed)
			var kept []*structured.AllocatedState
			var keptViews []stateView
			for step := range 300 {
				g.step(claimCache)
				got, err := m.ResourceClaims().GatherAllocatedState()
				if err != nil {
					t.Fatal(err)
				}
				want, err := upstream.ResourceClaims().GatherAllocatedState()
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(viewOf(withoutCoveredShares(want)), viewOf(got), sortStrings); diff != "" {
					t.Fatalf("step %d: state differs from kube-scheduler's (-want +got):\n%s", step, diff)
				}
				if step%25 == 0 {
					kept = append(kept, got)
					keptViews = append(keptViews, viewOf(got))
				}
			}
			if g.shares == 0 || g.whole == 0 || g.bare == 0 {
				t.Fatalf("the claims never held devices of every kind: %d whole, %d shares, %d without capacity", g.whole, g.shares, g.bare)
			}
			for i, s := range kept {
				if diff := cmp.Diff(keptViews[i], viewOf(s), sortStrings); diff != "" {
					t.Errorf("state handed out at step %d changed later (-then +now):\n%s", 25*i, diff)
				}
			}
		})
	}
}

// claimGen changes claims at random, each change one a cluster could
// see: a claim created, allocated devices that are free, released,
// deleted.
type claimGen struct {
	rng    *rand.Rand
	rv     int
	claims map[string]*resourceapi.ResourceClaim
	// holder of each device held whole; shared devices' share count.
	heldWhole map[string]string
	shared    map[string]int
	// how many results of each kind were allocated.
	whole, shares, bare int
}

func newClaimGen(seed uint64) *claimGen {
	return &claimGen{rng: rand.New(rand.NewPCG(seed, 1)), claims: map[string]*resourceapi.ResourceClaim{}, heldWhole: map[string]string{}, shared: map[string]int{}}
}

func (g *claimGen) step(c *assumecache.AssumeCache) {
	name := "c" + strconv.Itoa(g.rng.IntN(12))
	old := g.claims[name]
	g.rv++
	switch {
	case old == nil:
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name), ResourceVersion: strconv.Itoa(g.rv)}}
		if g.rng.IntN(2) == 0 {
			claim.Status.Allocation = g.allocate(name)
		}
		g.claims[name] = claim
		assumecache.AddTestObject(c, claim)
	case g.rng.IntN(4) == 0:
		g.release(name, old.Status.Allocation)
		delete(g.claims, name)
		assumecache.DeleteTestObject(c, old)
	default:
		claim := old.DeepCopy()
		claim.ResourceVersion = strconv.Itoa(g.rv)
		if claim.Status.Allocation == nil {
			claim.Status.Allocation = g.allocate(name)
		} else {
			g.release(name, claim.Status.Allocation)
			claim.Status.Allocation = nil
		}
		g.claims[name] = claim
		assumecache.UpdateTestObject(c, claim)
	}
}

// allocate picks up to three of eight devices (four on each of two nodes), each whole if free, else
// a share of one not held whole.
func (g *claimGen) allocate(claim string) *resourceapi.AllocationResult {
	alloc := &resourceapi.AllocationResult{}
	for range 1 + g.rng.IntN(3) {
		r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: "gpu.example.com", Pool: "node-" + strconv.Itoa(g.rng.IntN(2)), Device: "gpu-" + strconv.Itoa(g.rng.IntN(4))}
		dev := r.Pool + "/" + r.Device
		if _, held := g.heldWhole[dev]; held {
			continue
		}
		switch kind := g.rng.IntN(6); {
		case kind == 0:
			r.AdminAccess = ptr.To(true)
		case kind == 1 && g.shared[dev] == 0:
			g.heldWhole[dev] = claim
			g.whole++
		default:
			r.ShareID = ptr.To(types.UID(fmt.Sprintf("%s-%d", claim, g.rv)))
			g.shared[dev]++
			g.shares++
			switch kind {
			case 2:
				g.bare++ // a share that says nothing of capacity
			case 3:
				r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse("0")}
			default:
				r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
					"cores":  *resource.NewQuantity(int64(1+g.rng.IntN(50)), resource.DecimalSI),
					"memory": *resource.NewQuantity(int64(1+g.rng.IntN(8))<<30, resource.BinarySI),
				}
			}
		}
		if !containsDevice(alloc, r) {
			alloc.Devices.Results = append(alloc.Devices.Results, r)
		} else if r.ShareID != nil {
			g.shared[dev]--
		} else if r.AdminAccess == nil {
			delete(g.heldWhole, dev)
		}
	}
	return alloc
}

func containsDevice(alloc *resourceapi.AllocationResult, r resourceapi.DeviceRequestAllocationResult) bool {
	for _, o := range alloc.Devices.Results {
		if o.Pool == r.Pool && o.Device == r.Device {
			return true
		}
	}
	return false
}

func (g *claimGen) release(claim string, alloc *resourceapi.AllocationResult) {
	if alloc == nil {
		return
	}
	for _, r := range alloc.Devices.Results {
		dev := r.Pool + "/" + r.Device
		switch {
		case ptr.Deref(r.AdminAccess, false):
		case r.ShareID != nil:
			g.shared[dev]--
		case g.heldWhole[dev] == claim:
			delete(g.heldWhole, dev)
		}
	}
}

// The replay's DRA manager changes no placement: on a slice of the trace
// where two in five GPU pods share GPUs, kube-scheduler's manager finds
// the same feasible nodes for every pod and places every pod where the
// replay's does, with kube-scheduler's default profile and with Strata's
// (whose plugins read the state too).
func TestDRAManagerKeepsPlacements(t *testing.T) {
	nodes, pods := readTrace(t, "gpushare40")
	some := everyKth(nodes, 12)
	c := buildCluster(t, some)
	ctx := testContext(t)
	sample := Sample(pods, c.TotalMilli, 3)
	for _, profile := range []string{ProfileDefault, ProfileStrata} {
		t.Run(profile, func(t *testing.T) {
			prof := loadProfile(t, profile)
			res, s, err := replayFramework(ctx, c, sample, prof, 3, 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := s.dra.(*draManager); !ok {
				t.Fatalf("the replay runs with %T, not its own DRA manager", s.dra)
			}
			checkReplay(t, c, sample, res, s)
			kubeSchedulerDRAManager = true
			defer func() { kubeSchedulerDRAManager = false }()
			plain, s, err := replayFramework(ctx, c, sample, prof, 3, 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := s.dra.(*draManager); ok {
				t.Fatal("the replay did not run with kube-scheduler's DRA manager")
			}
			if diff := cmp.Diff(plain.Feasible, res.Feasible); diff != "" {
				t.Errorf("feasible nodes per pod differ (-kube-scheduler's manager +the replay's):\n%s", diff)
			}
			if diff := cmp.Diff(plain.Nodes, res.Nodes); diff != "" {
				t.Errorf("placements differ (-kube-scheduler's manager +the replay's):\n%s", diff)
			}
			t.Logf("%d nodes, %d pods, %d placed", len(some), len(sample), len(sample)-res.Failed)
		})
	}
}
