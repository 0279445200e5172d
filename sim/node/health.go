package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Device health works as in kubelet: every DRA plugin that offers the
// health service is watched over its NodeWatchResources stream; each
// report refreshes a per-driver cache; a device not refreshed within its
// health check timeout reads Unknown; and the pods that hold a device
// whose health changed get containerStatuses[].allocatedResourcesStatus
// rewritten, one entry per claim (or claim request) the container uses.

// defaultHealthTimeout is kubelet's default for reports without one.
const defaultHealthTimeout = 30 * time.Second

// deviceKey names a device within a driver: "<pool>/<device>".
type deviceKey struct{ driver, pool, device string }

type healthEntry struct {
	health  corev1.ResourceHealthStatus
	message string
	updated time.Time
	timeout time.Duration
}

// healthCache is a node's view of its devices' health.
type healthCache struct {
	mu      sync.Mutex
	devices map[deviceKey]healthEntry
}

func newHealthCache() *healthCache { return &healthCache{devices: map[deviceKey]healthEntry{}} }

// update applies one report of a driver and returns the devices whose
// health changed, including devices that went stale.
func (c *healthCache) update(driver string, resp *drahealthv1.NodeWatchResourcesResponse, now time.Time) []deviceKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	var changed []deviceKey
	seen := map[deviceKey]bool{}
	for _, d := range resp.Devices {
		if d.Device == nil {
			continue
		}
		key := deviceKey{driver: driver, pool: d.Device.PoolName, device: d.Device.DeviceName}
		seen[key] = true
		e := healthEntry{health: healthOf(d.Health), message: d.Message, updated: now, timeout: defaultHealthTimeout}
		if d.HealthCheckTimeoutSeconds > 0 {
			e.timeout = time.Duration(d.HealthCheckTimeoutSeconds) * time.Second
		}
		if old, ok := c.devices[key]; !ok || old.health != e.health || old.message != e.message {
			changed = append(changed, key)
		}
		c.devices[key] = e
	}
	for key, e := range c.devices {
		if key.driver == driver && !seen[key] && now.Sub(e.updated) > e.timeout {
			delete(c.devices, key)
			changed = append(changed, key)
		}
	}
	return changed
}

// get returns a device's health as kubelet reports it: Unknown when it
// was never reported or its last report is too old.
func (c *healthCache) get(key deviceKey, now time.Time) (corev1.ResourceHealthStatus, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.devices[key]
	if !ok || now.Sub(e.updated) > e.timeout {
		return corev1.ResourceHealthStatusUnknown, ""
	}
	return e.health, e.message
}

// forget drops a driver's entries when its stream ends.
func (c *healthCache) forget(driver string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.devices {
		if key.driver == driver {
			delete(c.devices, key)
		}
	}
}

func healthOf(h drahealthv1.HealthStatus) corev1.ResourceHealthStatus {
	switch h {
	case drahealthv1.HealthStatus_HEALTHY:
		return corev1.ResourceHealthStatusHealthy
	case drahealthv1.HealthStatus_UNHEALTHY:
		return corev1.ResourceHealthStatusUnhealthy
	}
	return corev1.ResourceHealthStatusUnknown
}

// offersHealth reports whether a plugin lists the health service.
func offersHealth(info *registerapi.PluginInfo) bool {
	return slices.Contains(info.SupportedVersions, drahealthv1.DRAResourceHealthService)
}

// watchHealth follows one plugin's health stream until ctx ends or the
// plugin says it has none; a broken stream is reopened, as kubelet does.
func watchHealth(ctx context.Context, driver string, conn grpc.ClientConnInterface, cache *healthCache, changed func([]deviceKey)) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "driver", driver)
	client := drahealthv1.NewDRAResourceHealthClient(conn)
	for ctx.Err() == nil {
		err := followHealth(ctx, driver, client, cache, changed)
		if status.Code(err) == codes.Unimplemented {
			logger.V(2).Info("Plugin reports no device health")
			return
		}
		if ctx.Err() == nil {
			logger.V(4).Info("Health stream ended, reopening", "err", err)
			cache.forget(driver)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func followHealth(ctx context.Context, driver string, client drahealthv1.DRAResourceHealthClient, cache *healthCache, changed func([]deviceKey)) error {
	stream, err := client.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if keys := cache.update(driver, resp, time.Now()); len(keys) > 0 {
			changed(keys)
		}
	}
}

// preparedDevice is one device a claim of a pod got, as the plugin
// prepared it.
type preparedDevice struct {
	driver   string
	pool     string
	device   string
	requests []string
	cdiIDs   []string
}

// allocatedResourcesStatus computes a container's entries: one per
// resources.claims entry, named "claim:<name>" or "claim:<name>/<request>",
// listing the health of each device that serves it.
func (n *Node) allocatedResourcesStatus(c corev1.Container, devices map[string][]preparedDevice, now time.Time) []corev1.ResourceStatus {
	var out []corev1.ResourceStatus
	for _, ref := range c.Resources.Claims {
		name := "claim:" + ref.Name
		if ref.Request != "" {
			name += "/" + ref.Request
		}
		st := corev1.ResourceStatus{Name: corev1.ResourceName(name)}
		seen := map[string]bool{}
		for _, d := range devices[ref.Name] {
			if ref.Request != "" && !servesRequest(d.requests, ref.Request) {
				continue
			}
			id := fmt.Sprintf("%s/%s/%s", d.driver, d.pool, d.device)
			if len(d.cdiIDs) > 0 {
				id = d.cdiIDs[0]
			}
			if seen[id] {
				continue
			}
			seen[id] = true
			health, msg := n.health.get(deviceKey{driver: d.driver, pool: d.pool, device: d.device}, now)
			rh := corev1.ResourceHealth{ResourceID: corev1.ResourceID(id), Health: health}
			if msg != "" {
				rh.Message = &msg
			}
			st.Resources = append(st.Resources, rh)
		}
		if len(st.Resources) > 0 {
			sort.Slice(st.Resources, func(i, j int) bool { return st.Resources[i].ResourceID < st.Resources[j].ResourceID })
			out = append(out, st)
		}
	}
	return out
}

// withResourceHealth sets allocatedResourcesStatus on every container
// status of a pod and reports whether anything changed.
func (n *Node) withResourceHealth(st *corev1.PodStatus, pod *corev1.Pod, devices map[string][]preparedDevice) bool {
	now := time.Now()
	changed := false
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		idx := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == cs.Name })
		if idx < 0 {
			continue
		}
		want := n.allocatedResourcesStatus(pod.Spec.Containers[idx], devices, now)
		if !equality.Semantic.DeepEqual(cs.AllocatedResourcesStatus, want) {
			cs.AllocatedResourcesStatus = want
			changed = true
		}
	}
	return changed
}

// usesAny reports whether a pod's devices include one of keys.
func usesAny(devices map[string][]preparedDevice, keys []deviceKey) bool {
	for _, list := range devices {
		for _, d := range list {
			if slices.Contains(keys, deviceKey{driver: d.driver, pool: d.pool, device: d.device}) {
				return true
			}
		}
	}
	return false
}

// refreshHealth rewrites the resource health in the status of the
// node's running pods that hold one of the changed devices.
func (m *Manager) refreshHealth(ctx context.Context, n *Node, keys []deviceKey) {
	for _, obj := range m.podsOn(n.Spec.Name) {
		pod := obj
		devices := m.devicesOf(pod.UID)
		if devices == nil || pod.Status.Phase != corev1.PodRunning || !usesAny(devices, keys) {
			continue
		}
		if err := m.updateHealth(ctx, n, pod, devices); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Updating device health in pod status failed", "pod", klog.KObj(pod))
		}
	}
}

func (m *Manager) updateHealth(ctx context.Context, n *Node, pod *corev1.Pod, devices map[string][]preparedDevice) error {
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := m.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			return nil // gone or going: nothing to report
		}
		updated := cur.DeepCopy()
		if !n.withResourceHealth(&updated.Status, cur, devices) {
			return nil
		}
		_, err = m.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
	return errors.New("pod status kept changing")
}

// podsOn lists the pods bound to a node, from the informer.
func (m *Manager) podsOn(node string) []*corev1.Pod {
	objs, _ := m.pods.GetIndexer().ByIndex(nodeNameIndex, node)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

func (m *Manager) devicesOf(uid types.UID) map[string][]preparedDevice {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.devices[uid]
}
