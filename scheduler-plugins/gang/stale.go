package gang

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// A member that went through PreBind and then did not bind (its
// scheduler stopped, or the bind failed) keeps what PreBind wrote: its
// claims allocated and reserved for it, and, for extended resources a
// DeviceClass maps, the claim the scheduler created for it. The
// scheduler's DynamicResources plugin gives those back in its PostFilter
// (a claim reserved for nobody but the pod is deallocated, the extended
// resources' claim of an earlier cycle deleted); without that, such a
// member is unschedulable on every node ("cannot schedule extended
// resource claim") or only where its allocation is. StrataGang's
// PostFilter comes first and ends the chain for gang members (its
// UnschedulableAndUnresolvable keeps pod-by-pod preemption away from a
// single member), so it gives them back itself, off the scheduling loop.

// staleReleases is the set of claims being given back, by UID, so that a
// member failing again meanwhile does not write them twice.
type staleReleases struct{ inFlight sync.Map }

// releaseStaleClaims gives back what an earlier cycle of an unbound
// member left: its claims allocated and reserved for it alone (or for
// nobody), and its extended resources' claim from an earlier cycle. The
// API writes run in the background; the claims' events send the member
// round again.
func (p *Plugin) releaseStaleClaims(ctx context.Context, pod *corev1.Pod) {
	if pod.Spec.NodeName != "" || p.capacity == nil || p.handle == nil {
		return
	}
	var deallocate, remove []*resourceapi.ResourceClaim
	for _, c := range p.capacity.allocatedClaims(pod) {
		if reservedForAtMost(c.claim, pod.UID) {
			deallocate = append(deallocate, c.claim)
		}
	}
	if c := p.extendedResourceClaim(pod); c != nil {
		remove = append(remove, c)
	}
	if len(deallocate)+len(remove) == 0 {
		return
	}
	cs := p.handle.ClientSet()
	if cs == nil {
		return
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	for _, c := range slices.Concat(deallocate, remove) {
		if _, busy := p.stale.inFlight.LoadOrStore(c.UID, struct{}{}); busy {
			continue
		}
		del := slices.Contains(remove, c)
		go func() {
			defer p.stale.inFlight.Delete(c.UID)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			if del {
				err = deleteClaim(ctx, cs.ResourceV1().ResourceClaims(c.Namespace), c)
			} else {
				err = deallocateClaim(ctx, cs.ResourceV1().ResourceClaims(c.Namespace), c, pod.UID)
			}
			if err != nil {
				logger.Error(err, "Could not give back a claim an earlier cycle of the member left", "claim", klog.KObj(c), "delete", del)
				return
			}
			logger.V(2).Info("Gave back a claim an earlier cycle of the member left", "claim", klog.KObj(c), "delete", del)
		}()
	}
}

// reservedForAtMost reports whether the claim is reserved for nobody or
// for the pod alone: no running pod uses it.
func reservedForAtMost(c *resourceapi.ResourceClaim, pod types.UID) bool {
	r := c.Status.ReservedFor
	return len(r) == 0 || len(r) == 1 && r[0].UID == pod
}

// extendedResourceClaim returns the claim an earlier cycle created for the
// pod's extended resources (it has requests; the scheduler's in-memory
// one of the current cycle has none), nil if there is none. Only pods
// requesting extended resources are looked up.
func (p *Plugin) extendedResourceClaim(pod *corev1.Pod) *resourceapi.ResourceClaim {
	extended := false
	for name := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		if scarce(name) {
			extended = true
		}
	}
	if !extended {
		return nil
	}
	dra := p.handle.SharedDRAManager()
	if dra == nil {
		return nil
	}
	claims, err := dra.ResourceClaims().List()
	if err != nil {
		return nil
	}
	for _, c := range claims {
		if c.Namespace != pod.Namespace || c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || len(c.Spec.Devices.Requests) == 0 {
			continue
		}
		for _, o := range c.OwnerReferences {
			if o.UID == pod.UID && ptr.Deref(o.Controller, false) && reservedForAtMost(c, pod.UID) {
				return c
			}
		}
	}
	return nil
}

// claimClient is what giving a claim back writes through.
type claimClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error)
	Update(ctx context.Context, claim *resourceapi.ResourceClaim, opts metav1.UpdateOptions) (*resourceapi.ResourceClaim, error)
	UpdateStatus(ctx context.Context, claim *resourceapi.ResourceClaim, opts metav1.UpdateOptions) (*resourceapi.ResourceClaim, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// deallocateClaim clears the claim's allocation, as long as it is the
// same claim and still reserved for the pod alone or for nobody.
func deallocateClaim(ctx context.Context, client claimClient, c *resourceapi.ResourceClaim, pod types.UID) error {
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := c
		if !first {
			var err error
			if cur, err = client.Get(ctx, c.Name, metav1.GetOptions{}); err != nil {
				return ignoreNotFound(err)
			}
		}
		first = false
		if cur.UID != c.UID || cur.Status.Allocation == nil || !reservedForAtMost(cur, pod) {
			return nil
		}
		cur = cur.DeepCopy()
		cur.Status.Allocation, cur.Status.ReservedFor, cur.Status.Devices = nil, nil, nil
		_, err := client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return ignoreNotFound(err)
	})
}

// deleteClaim deletes the claim, its delete protection first (the
// ResourceClaim controller adds it to claims that are allocated).
func deleteClaim(ctx context.Context, client claimClient, c *resourceapi.ResourceClaim) error {
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := c
		if !first {
			var err error
			if cur, err = client.Get(ctx, c.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		first = false
		i := slices.Index(cur.Finalizers, resourceapi.Finalizer)
		if i < 0 {
			return nil
		}
		cur = cur.DeepCopy()
		cur.Finalizers = slices.Delete(cur.Finalizers, i, i+1)
		_, err := client.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return ignoreNotFound(err)
	}
	err = client.Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &c.UID}})
	return ignoreNotFound(err)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
