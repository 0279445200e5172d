package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// errNotReady means the pod cannot start yet for a reason that resolves by
// itself (claim not created or not reserved yet); the pod is retried.
var errNotReady = errors.New("not ready")

// podClaim is one entry of pod.spec.resourceClaims resolved to its claim,
// or the claim the scheduler created for the pod's extended resources.
type podClaim struct {
	podClaimName string
	claim        *resourceapi.ResourceClaim
	// extended maps container names to the claim requests that satisfy
	// their extended resources; set only for the extended-resource claim.
	extended map[string][]string
}

// preparedDevices maps claim UID to the devices the plugins returned.
type preparedDevices map[types.UID][]preparedDevice

// startPod prepares the pod's claims and returns the containers' view of
// them and the devices of each pod claim. It is idempotent: prepare calls
// are idempotent in the plugins and the node's claim bookkeeping is keyed
// by pod UID.
func (n *Node) startPod(ctx context.Context, pod *corev1.Pod) (map[string]Container, map[string][]preparedDevice, error) {
	claims, err := n.resolveClaims(ctx, pod)
	if err != nil {
		return nil, nil, err
	}
	devices, err := n.prepare(ctx, pod, claims)
	if err != nil {
		return nil, nil, err
	}
	containers := map[string]Container{}
	for _, c := range pod.Spec.Containers {
		ids := containerCDIDevices(c, claims, devices)
		if len(ids) == 0 {
			continue
		}
		view, err := n.runtime.inject(ids)
		if err != nil {
			return nil, nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		containers[c.Name] = view
	}
	byPodClaim := map[string][]preparedDevice{}
	for _, pc := range claims {
		if pc.podClaimName != "" {
			byPodClaim[pc.podClaimName] = devices[pc.claim.UID]
		}
	}
	return containers, byPodClaim, nil
}

// resolveClaims finds the ResourceClaim of every pod claim and checks that
// it is allocated and reserved for the pod, as kubelet does before calling
// the plugins.
func (n *Node) resolveClaims(ctx context.Context, pod *corev1.Pod) ([]podClaim, error) {
	var out []podClaim
	for _, pc := range pod.Spec.ResourceClaims {
		name, err := claimName(pod, pc)
		if err != nil {
			return nil, err
		}
		if name == "" {
			continue // a template that needs no claim
		}
		claim, err := n.getReservedClaim(ctx, pod, name)
		if err != nil {
			return nil, err
		}
		out = append(out, podClaim{podClaimName: pc.Name, claim: claim})
	}
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil {
		claim, err := n.getReservedClaim(ctx, pod, ext.ResourceClaimName)
		if err != nil {
			return nil, err
		}
		pc := podClaim{claim: claim, extended: map[string][]string{}}
		for _, m := range ext.RequestMappings {
			pc.extended[m.ContainerName] = append(pc.extended[m.ContainerName], m.RequestName)
		}
		out = append(out, pc)
	}
	return out, nil
}

// getReservedClaim fetches a claim and checks that it is allocated and
// reserved for the pod.
func (n *Node) getReservedClaim(ctx context.Context, pod *corev1.Pod, name string) (*resourceapi.ResourceClaim, error) {
	claim, err := n.Env.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get ResourceClaim %s/%s: %w", pod.Namespace, name, err)
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("%w: ResourceClaim %s/%s is not allocated", errNotReady, pod.Namespace, name)
	}
	if !reservedFor(claim, pod.UID) {
		return nil, fmt.Errorf("%w: ResourceClaim %s/%s is not reserved for the pod", errNotReady, pod.Namespace, name)
	}
	return claim, nil
}

func claimName(pod *corev1.Pod, pc corev1.PodResourceClaim) (string, error) {
	if pc.ResourceClaimName != nil {
		return *pc.ResourceClaimName, nil
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == pc.Name {
			if st.ResourceClaimName == nil {
				return "", nil
			}
			return *st.ResourceClaimName, nil
		}
	}
	return "", fmt.Errorf("%w: claim for pod claim %q not generated yet", errNotReady, pc.Name)
}

func reservedFor(claim *resourceapi.ResourceClaim, uid types.UID) bool {
	for _, r := range claim.Status.ReservedFor {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// prepare calls NodePrepareResources once per driver with all of the
// pod's claims that use it and records the pod as a user of each claim.
func (n *Node) prepare(ctx context.Context, pod *corev1.Pod, claims []podClaim) (preparedDevices, error) {
	byDriver := map[string][]*drapb.Claim{}
	driversOf := map[types.UID][]string{}
	for _, pc := range claims {
		for _, d := range claimDrivers(pc.claim) {
			byDriver[d] = append(byDriver[d], &drapb.Claim{Namespace: pc.claim.Namespace, Name: pc.claim.Name, Uid: string(pc.claim.UID)})
			driversOf[pc.claim.UID] = append(driversOf[pc.claim.UID], d)
		}
	}
	// Recorded before any driver is asked, as the kubelet records a claim
	// before preparing it: a claim one driver prepared and another failed
	// is still unprepared with every driver when its pod goes.
	n.mu.Lock()
	for _, pc := range claims {
		entry := n.claims[pc.claim.UID]
		if entry == nil {
			entry = &preparedClaim{namespace: pc.claim.Namespace, name: pc.claim.Name, drivers: driversOf[pc.claim.UID], pods: map[types.UID]bool{}}
			n.claims[pc.claim.UID] = entry
		}
		entry.pods[pod.UID] = true
	}
	n.mu.Unlock()
	devices := preparedDevices{}
	for _, driver := range sortedKeys(byDriver) {
		client, err := n.clients.client(ctx, driver)
		if err != nil {
			return nil, err
		}
		resp, err := client.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: byDriver[driver]})
		if err != nil {
			return nil, fmt.Errorf("NodePrepareResources on %s: %w", driver, err)
		}
		var errs []string
		for _, c := range byDriver[driver] {
			r, ok := resp.Claims[c.Uid]
			switch {
			case !ok:
				errs = append(errs, fmt.Sprintf("claim %s/%s: no result from %s", c.Namespace, c.Name, driver))
			case r.Error != "":
				errs = append(errs, fmt.Sprintf("claim %s/%s: %s", c.Namespace, c.Name, r.Error))
			default:
				for _, d := range r.Devices {
					devices[types.UID(c.Uid)] = append(devices[types.UID(c.Uid)], preparedDevice{
						driver: driver, pool: d.PoolName, device: d.DeviceName, requests: d.RequestNames, cdiIDs: d.CdiDeviceIds})
				}
			}
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("prepare dynamic resources: %s", strings.Join(errs, "; "))
		}
	}
	return devices, nil
}

// claimDrivers lists the drivers of a claim's allocated devices.
func claimDrivers(claim *resourceapi.ResourceClaim) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if !seen[r.Driver] {
			seen[r.Driver] = true
			out = append(out, r.Driver)
		}
	}
	sort.Strings(out)
	return out
}

// containerCDIDevices picks the CDI devices for one container: those of
// the claims (and requests) it lists in resources.claims.
func containerCDIDevices(c corev1.Container, claims []podClaim, devices preparedDevices) []string {
	var ids []string
	for _, pc := range claims {
		for _, request := range pc.extended[c.Name] {
			for _, d := range devices[pc.claim.UID] {
				if servesRequest(d.requests, request) {
					ids = append(ids, d.cdiIDs...)
				}
			}
		}
	}
	for _, ref := range c.Resources.Claims {
		for _, pc := range claims {
			if pc.extended != nil || pc.podClaimName != ref.Name {
				continue
			}
			for _, d := range devices[pc.claim.UID] {
				if ref.Request == "" || servesRequest(d.requests, ref.Request) {
					ids = append(ids, d.cdiIDs...)
				}
			}
		}
	}
	return ids
}

func servesRequest(names []string, request string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == request || strings.HasPrefix(n, request+"/") {
			return true
		}
	}
	return false
}

// releasePod drops the pod from the claims it used and unprepares every
// claim that no other pod on the node uses any more.
func (n *Node) releasePod(ctx context.Context, podUID types.UID) error {
	n.mu.Lock()
	var release []types.UID
	for uid, c := range n.claims {
		if !c.pods[podUID] {
			continue
		}
		if len(c.pods) == 1 {
			release = append(release, uid)
		} else {
			delete(c.pods, podUID)
		}
	}
	n.mu.Unlock()
	for _, uid := range release {
		if err := n.unprepare(ctx, uid); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) unprepare(ctx context.Context, uid types.UID) error {
	n.mu.Lock()
	c := n.claims[uid]
	n.mu.Unlock()
	if c == nil {
		return nil
	}
	for _, driver := range c.drivers {
		client, err := n.clients.client(ctx, driver)
		if err != nil {
			return err
		}
		resp, err := client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{
			Claims: []*drapb.Claim{{Namespace: c.namespace, Name: c.name, Uid: string(uid)}},
		})
		if err != nil {
			return fmt.Errorf("NodeUnprepareResources on %s: %w", driver, err)
		}
		if r := resp.Claims[string(uid)]; r == nil || r.Error != "" {
			msg := "no result"
			if r != nil {
				msg = r.Error
			}
			return fmt.Errorf("unprepare claim %s/%s on %s: %s", c.namespace, c.name, driver, msg)
		}
	}
	n.mu.Lock()
	delete(n.claims, uid)
	n.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Claim unprepared", "claim", klog.KRef(c.namespace, c.name))
	return nil
}

// PreparedClaims returns the UIDs of the claims prepared on the node.
func (n *Node) PreparedClaims() []types.UID {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]types.UID, 0, len(n.claims))
	for uid := range n.claims {
		out = append(out, uid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
