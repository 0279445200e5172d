package devicecount

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// indexState is what an Index must hold, worked out from scratch from
// every slice and claim: the names of each node's current node-local
// slices in the allocator's order, of the current other slices, and the
// holders of each device, by claim.
type indexState struct {
	Nodes   map[string][]string
	Wide    []string
	Holders map[string][]Holder
}

func scratch(consumable bool, sliceList []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) indexState {
	out := indexState{Nodes: map[string][]string{}, Holders: map[string][]Holder{}}
	newest := NewestGenerations(sliceList)
	byNode := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range sliceList {
		switch {
		case newest.Stale(s):
		case nodeLocal(s):
			byNode[*s.Spec.NodeName] = append(byNode[*s.Spec.NodeName], s)
		default:
			out.Wide = append(out.Wide, s.Name)
		}
	}
	for node, list := range byNode {
		sortLikeAllocator(list)
		for _, s := range list {
			out.Nodes[node] = append(out.Nodes[node], s.Name)
		}
	}
	slices.Sort(out.Wide)
	x := NewIndex(consumable) // for Holder only
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if h, ok := x.Holder(c.UID, c.Namespace, c.Name, r); ok {
				id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device).String()
				out.Holders[id] = append(out.Holders[id], h)
			}
		}
	}
	for _, hs := range out.Holders {
		sortHolders(hs)
	}
	return out
}

func sortHolders(hs []Holder) {
	slices.SortFunc(hs, func(a, b Holder) int { return cmp.Compare(a.Claim, b.Claim) })
	for _, h := range hs {
		slices.SortFunc(h.Consumed, func(a, b CapacityMilli) int { return cmp.Compare(a.Name, b.Name) })
	}
}

// held reads the index as indexState; versions are the nodes' versions.
func held(x *Index) (indexState, map[string]uint64) {
	v := x.Read()
	defer v.Done()
	out := indexState{Nodes: map[string][]string{}, Holders: map[string][]Holder{}}
	versions := map[string]uint64{}
	for node := range x.nodes {
		list, version := v.Node(node)
		versions[node] = version
		for _, s := range list {
			out.Nodes[node] = append(out.Nodes[node], s.Name)
		}
	}
	for _, s := range v.Wide() {
		out.Wide = append(out.Wide, s.Name)
	}
	for id := range x.holders {
		hs := slices.Clone(v.Holders(id))
		for i := range hs {
			hs[i].Consumed = slices.Clone(hs[i].Consumed)
		}
		sortHolders(hs)
		out.Holders[id.String()] = hs
	}
	return out, versions
}

// nodeView is what a node's counts depend on: its slices and the
// holders of the devices of its pools (those with current slices on it).
func nodeView(s indexState, node string, pools map[string]bool) string {
	var b strings.Builder
	fmt.Fprint(&b, s.Nodes[node])
	for _, id := range slices.Sorted(maps.Keys(s.Holders)) {
		if parts := strings.Split(id, "/"); len(parts) == 3 && pools[parts[1]] {
			fmt.Fprint(&b, id, s.Holders[id])
		}
	}
	return b.String()
}

// A random sequence of slice and claim events: after each, the index
// holds what a count from scratch over every object finds, and the
// version of every node whose slices or holders changed has changed.
func TestIndexAgreesWithARecount(t *testing.T) {
	for _, consumable := range []bool{true, false} {
		t.Run(fmt.Sprintf("consumable=%v", consumable), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			x := NewIndex(consumable)
			sliceObjs := map[string]*resourceapi.ResourceSlice{}
			claims := map[types.UID]*resourceapi.ResourceClaim{}
			nodes := []string{"n0", "n1", "n2", "n3"}
			// Pools p0..p5 belong to a node each (p<i> on n<i%4>); p6 is
			// network-attached.
			poolNode := map[string]string{}
			for i := range 6 {
				poolNode[fmt.Sprintf("p%d", i)] = nodes[i%len(nodes)]
			}
			rv := 0
			newSlice := func(name, pool string, gen int64) *resourceapi.ResourceSlice {
				rv++
				s := &resourceapi.ResourceSlice{
					ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: fmt.Sprint(rv)},
					Spec:       resourceapi.ResourceSliceSpec{Driver: "d", Pool: resourceapi.ResourcePool{Name: pool, Generation: gen}},
				}
				if node, ok := poolNode[pool]; ok {
					s.Spec.NodeName = ptr.To(node)
				} else {
					s.Spec.AllNodes = ptr.To(true)
				}
				for i := range 1 + rng.IntN(3) {
					s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("dev%d", i)})
				}
				return s
			}
			newAllocation := func() *resourceapi.AllocationResult {
				a := &resourceapi.AllocationResult{}
				for range 1 + rng.IntN(3) {
					r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: "d", Pool: fmt.Sprintf("p%d", rng.IntN(7)), Device: fmt.Sprintf("dev%d", rng.IntN(3))}
					switch rng.IntN(4) {
					case 0:
						r.ShareID = ptr.To(types.UID(fmt.Sprint(rng.Int())))
						r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"cores": *resource.NewQuantity(int64(rng.IntN(50)), resource.DecimalSI)}
					case 1:
						r.AdminAccess = ptr.To(true)
					}
					a.Devices.Results = append(a.Devices.Results, r)
				}
				return a
			}
			before, beforeVersions := held(x)
			for step := range 3000 {
				var what string
				switch op := rng.IntN(6); op {
				case 0, 1: // a slice added or changed (maybe moved to another pool)
					name := fmt.Sprintf("s%d", rng.IntN(12))
					s := newSlice(name, fmt.Sprintf("p%d", rng.IntN(7)), int64(1+rng.IntN(3)))
					old := sliceObjs[name]
					x.SetSlice(old, s)
					sliceObjs[name] = s
					what = fmt.Sprintf("slice %s in pool %s, generation %d", name, s.Spec.Pool.Name, s.Spec.Pool.Generation)
				case 2: // a slice deleted
					name := fmt.Sprintf("s%d", rng.IntN(12))
					if old := sliceObjs[name]; old != nil {
						x.SetSlice(old, nil)
						delete(sliceObjs, name)
					}
					what = "slice " + name + " deleted"
				case 3, 4: // a claim added or changed: allocated, changed in other ways, or deallocated
					uid := types.UID(fmt.Sprintf("c%d", rng.IntN(10)))
					c := claims[uid]
					if c == nil {
						c = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "ns", UID: uid}}
					} else {
						c = c.DeepCopy()
					}
					switch k := rng.IntN(3); {
					case k == 0:
						c.Status.Allocation = nil
					case k == 1 && c.Status.Allocation != nil:
						// Another update (reservedFor): the same allocation.
						c.Status.Allocation = claims[uid].Status.Allocation
					default:
						if c.Status.Allocation == nil {
							c.Status.Allocation = newAllocation()
						}
					}
					x.SetClaim(c)
					claims[uid] = c
					what = "claim " + string(uid) + " set"
				case 5: // a claim deleted
					uid := types.UID(fmt.Sprintf("c%d", rng.IntN(10)))
					x.DeleteClaim(uid)
					delete(claims, uid)
					what = "claim " + string(uid) + " deleted"
				}
				want := scratch(consumable, slices.Collect(maps.Values(sliceObjs)), slices.Collect(maps.Values(claims)))
				got, versions := held(x)
				if diff := gocmp.Diff(want, got); diff != "" {
					t.Fatalf("step %d (%s): index differs from a recount (-want +got):\n%s", step, what, diff)
				}
				current := NewestGenerations(slices.Collect(maps.Values(sliceObjs)))
				for _, node := range nodes {
					pools := map[string]bool{}
					for _, s := range sliceObjs {
						if !current.Stale(s) && nodeLocal(s) && *s.Spec.NodeName == node {
							pools[s.Spec.Pool.Name] = true
						}
					}
					if nodeView(before, node, pools) != nodeView(got, node, pools) && len(got.Nodes[node]) > 0 && versions[node] == beforeVersions[node] {
						t.Fatalf("step %d (%s): node %s changed, its version %d did not", step, what, node, versions[node])
					}
				}
				before, beforeVersions = got, versions
			}
		})
	}
}
