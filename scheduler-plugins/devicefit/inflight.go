package devicefit

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/strata-sh/strata/scheduler-plugins/internal/devicecount"
)

// inFlight follows the claims that the scheduler may allocate before the
// informer delivers them: DynamicResources keeps an allocation in flight
// from Reserve until its PreBind writes it, and then in its assume cache
// until the informer delivers the claim. GatherAllocatedState counts
// both, and so does this plugin, without a pass over every claim: it
// watches the unallocated claims of each pod it sees in PreFilter (a
// claim is only allocated in flight in its pod's cycle, and cycles run
// one at a time), and at each PreFilter asks the claim tracker about
// each of them, until the index holds the claim's allocation, or the
// claim is gone or neither in flight nor allocated (its pod's cycle
// failed; the pod's next PreFilter watches it again).
//
// So the watched claims are those of the pods between PreFilter and the
// informer's delivery of their claims: the pods being bound, a few. The
// claims of pods scheduled by another profile of the scheduler are not
// watched; until the informer delivers them the plugin counts their
// devices free, which only lets a node through to the allocator.
type inFlight struct {
	mu     sync.Mutex
	claims map[types.UID]watched
}

type watched struct{ namespace, name string }

// watch adds claims to the watched ones.
func (f *inFlight) watch(claims []*resourceapi.ResourceClaim) {
	if len(claims) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range claims {
		f.claims[c.UID] = watched{c.Namespace, c.Name}
	}
}

// overlay returns the allocations of the watched claims that the
// scheduler holds (in flight, or written and assumed) and the index does
// not hold yet, by device, and the nodes of those devices' pools. It
// stops watching the claims that no longer need it.
func (f *inFlight) overlay(dra fwk.SharedDRAManager, x *devicecount.Index) (map[structured.DeviceID][]devicecount.Holder, sets.Set[string]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.claims) == 0 {
		return nil, nil
	}
	view := x.Read()
	defer view.Done()
	var out map[structured.DeviceID][]devicecount.Holder
	var nodes sets.Set[string]
	for uid, w := range f.claims {
		alloc := dra.ResourceClaims().GetPendingAllocation(uid)
		if alloc == nil {
			claim, err := dra.ResourceClaims().Get(w.namespace, w.name)
			if err != nil || claim.UID != uid || claim.Status.Allocation == nil || view.HasClaim(uid) {
				delete(f.claims, uid)
				continue
			}
			alloc = claim.Status.Allocation
		}
		for _, r := range alloc.Devices.Results {
			h, ok := x.Holder(uid, w.namespace, w.name, r)
			if !ok {
				continue
			}
			if out == nil {
				out, nodes = map[structured.DeviceID][]devicecount.Holder{}, sets.New[string]()
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			out[id] = append(out[id], h)
			nodes.Insert(view.PoolNodes(r.Driver, r.Pool)...)
		}
	}
	return out, nodes
}

func asSlice(obj any) *resourceapi.ResourceSlice {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, _ := obj.(*resourceapi.ResourceSlice)
	return s
}

func nodeName(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		return n.Name
	}
	return ""
}
