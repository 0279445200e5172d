package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/cluster"
	"github.com/strata-sh/strata/sim/controlplane"
	"github.com/strata-sh/strata/sim/node"
)

// env is one simulated cluster for a test.
type env struct {
	t      *testing.T
	ctx    context.Context
	sim    *sim.Sim
	client kubernetes.Interface
}

// with returns the environment for a subtest: the same cluster, failures
// reported to t.
func (e *env) with(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// startCluster boots a simulated cluster from a cluster file body and
// stops it when the test ends.
func startCluster(t *testing.T, clusterYAML string) *env {
	t.Helper()
	return startClusterWith(t, clusterYAML, controlplane.Options{})
}

// startClusterWith is startCluster with control plane options (feature
// gates, API groups).
func startClusterWith(t *testing.T, clusterYAML string, cp controlplane.Options) *env {
	t.Helper()
	return startSim(t, clusterYAML, sim.Config{ControlPlane: cp})
}

// startSim is startCluster with a simulator configuration (the cluster
// comes from clusterYAML).
func startSim(t *testing.T, clusterYAML string, cfg sim.Config) *env {
	t.Helper()
	c, err := cluster.Parse([]byte(clusterYAML))
	if err != nil {
		t.Fatalf("cluster file: %v", err)
	}
	cfg.Cluster = c
	ctx, cancel := context.WithCancel(context.Background())
	s, err := sim.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("start simulated cluster: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		cancel()
	})
	return &env{t: t, ctx: ctx, sim: s, client: s.ControlPlane.Client}
}

// eventually polls cond until it returns true, failing the test with msg
// after timeout.
func (e *env) eventually(timeout time.Duration, msg string, cond func(ctx context.Context) (bool, error)) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, timeout, true, cond); err != nil {
		e.t.Fatalf("%s: %v", msg, err)
	}
}

func (e *env) createPod(pod *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	created, err := e.client.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return created
}

func (e *env) createTemplate(tmpl *resourceapi.ResourceClaimTemplate) {
	e.t.Helper()
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create claim template %s: %v", tmpl.Name, err)
	}
}

// waitRunning waits for a pod to run and returns it.
func (e *env) waitRunning(ns, name string) *corev1.Pod {
	e.t.Helper()
	var pod *corev1.Pod
	e.eventually(2*time.Minute, fmt.Sprintf("pod %s/%s running", ns, name), func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	return pod
}

// waitUnschedulable waits for the scheduler to give up on a pod and
// returns its PodScheduled condition.
func (e *env) waitUnschedulable(ns, name string) corev1.PodCondition {
	e.t.Helper()
	var cond corev1.PodCondition
	e.eventually(2*time.Minute, fmt.Sprintf("pod %s/%s unschedulable", ns, name), func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				cond = c
				return true, nil
			}
		}
		return false, nil
	})
	return cond
}

// deletePod deletes a pod and waits until the node agent has finalized it.
func (e *env) deletePod(ns, name string) {
	e.t.Helper()
	pod, err := e.client.CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
	if err := e.client.CoreV1().Pods(ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
	e.eventually(time.Minute, fmt.Sprintf("pod %s/%s gone", ns, name), func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	e.waitClaimsReleased(ns, fmt.Sprintf("claims of pod %s/%s released", ns, name), func(c *resourceapi.ResourceClaim) bool {
		return ownedBy(c, pod.UID) || reservedFor(c, pod.UID)
	})
}

// waitClaimsReleased waits until held says no claim of the namespace is
// held: until then the scheduler counts its devices as in use. A pod's claims
// are released after the pod is gone, by the ResourceClaim controller,
// which deletes the claims made for the pod from templates and takes
// the pod out of (and, when it was the last, deallocates) the others.
func (e *env) waitClaimsReleased(ns, what string, held func(*resourceapi.ResourceClaim) bool) {
	e.t.Helper()
	e.eventually(time.Minute, what, func(ctx context.Context) (bool, error) {
		claims, err := e.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range claims.Items {
			if held(&claims.Items[i]) {
				return false, nil
			}
		}
		return true, nil
	})
}

func ownedBy(c *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == uid })
}

func reservedFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == uid })
}

// podClaim returns the ResourceClaim behind a pod's claim entry.
func (e *env) podClaim(pod *corev1.Pod, entry string) *resourceapi.ResourceClaim {
	e.t.Helper()
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == entry && st.ResourceClaimName != nil {
			c, err := e.client.ResourceV1().ResourceClaims(pod.Namespace).Get(e.ctx, *st.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				e.t.Fatalf("get claim %s: %v", *st.ResourceClaimName, err)
			}
			return c
		}
	}
	e.t.Fatalf("pod %s has no generated claim for %q", pod.Name, entry)
	return nil
}

func (e *env) node(name string) *node.Node {
	e.t.Helper()
	n := e.sim.Nodes.Node(name)
	if n == nil {
		e.t.Fatalf("no simulated node %s", name)
	}
	return n
}

// hardware returns a node's fake hardware.
func (e *env) hardware(name string) *cluster.NodeHardware {
	return e.node(name).Spec.Hardware.(*cluster.NodeHardware)
}

// cdiSpecPath is where the NVIDIA plugin writes a claim's CDI spec.
func (e *env) cdiSpecPath(nodeName string, claimUID types.UID) string {
	return filepath.Join(e.node(nodeName).Env.CDIDir, fmt.Sprintf("%s-claim_%s.json", nvidia.DriverName, claimUID))
}

func readCDISpec(t *testing.T, path string) *cdispec.Spec {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read CDI spec: %v", err)
	}
	spec := &cdispec.Spec{}
	if err := json.Unmarshal(raw, spec); err != nil {
		t.Fatalf("decode CDI spec %s: %v", path, err)
	}
	return spec
}

// checkpointPath is where a plugin of a simulated node keeps its
// checkpoint.
func (e *env) checkpointPath(nodeName, driver string) string {
	return filepath.Join(e.node(nodeName).Env.PluginDir(driver), "checkpoint.json")
}

// checkpointClaims returns the claim UIDs and phases in a plugin's
// checkpoint file.
func (e *env) checkpointClaims(nodeName, driver string) map[string]string {
	e.t.Helper()
	raw, err := os.ReadFile(e.checkpointPath(nodeName, driver))
	if err != nil {
		e.t.Fatalf("read checkpoint: %v", err)
	}
	var file struct {
		Data struct {
			Claims map[string]struct {
				Phase string `json:"phase"`
			} `json:"claims"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		e.t.Fatalf("decode checkpoint: %v", err)
	}
	out := map[string]string{}
	for uid, c := range file.Data.Claims {
		out[uid] = c.Phase
	}
	return out
}

// preparedClaims returns the claims a plugin's checkpoint records as
// prepared (or being prepared) on a node, each with the devices and
// capacity the plugin recorded: what the node holds, including claims
// already gone from the API server that the kubelet has not yet
// unprepared.
func (e *env) preparedClaims(nodeName, driver string) []resourceapi.ResourceClaim {
	e.t.Helper()
	raw, err := os.ReadFile(e.checkpointPath(nodeName, driver))
	if err != nil {
		e.t.Fatalf("read checkpoint: %v", err)
	}
	claims, err := testutil.CheckpointClaims(raw)
	if err != nil {
		e.t.Fatalf("checkpoint of %s on %s: %v", driver, nodeName, err)
	}
	return claims
}

// devicesOf returns the devices of a type a driver published for a node.
func (e *env) devicesOf(nodeName, driver, typ string) map[string]resourceapi.Device {
	e.t.Helper()
	slices, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("list slices: %v", err)
	}
	out := map[string]resourceapi.Device{}
	for _, s := range slices.Items {
		if s.Spec.Driver != driver || s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if a := d.Attributes["type"]; a.StringValue != nil && *a.StringValue == typ {
				out[d.Name] = d
			}
		}
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// examplesDir holds the manifests users copy; tests apply them as they are.
const examplesDir = "../../deployments/examples"

// applyFile applies a manifest file, as strata-sim -f does.
func (e *env) applyFile(path string) {
	e.t.Helper()
	objs, err := apply.ReadPaths([]string{path})
	if err != nil {
		e.t.Fatalf("read %s: %v", path, err)
	}
	if err := e.sim.Apply(e.ctx, objs); err != nil {
		e.t.Fatalf("apply %s: %v", path, err)
	}
}

// waitEvent waits for an event of the given reason about an object and
// returns its message.
func (e *env) waitEvent(ns, name, reason string) string {
	e.t.Helper()
	var msg string
	e.eventually(2*time.Minute, fmt.Sprintf("%s event for %s/%s", reason, ns, name), func(ctx context.Context) (bool, error) {
		events, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			msg = ev.Message
			return true, nil
		}
		return false, nil
	})
	return msg
}

// claimResults returns the allocation results of the claim behind a pod's
// claim entry.
func (e *env) claimResults(pod *corev1.Pod, entry string) []resourceapi.DeviceRequestAllocationResult {
	e.t.Helper()
	return e.podClaim(pod, entry).Status.Allocation.Devices.Results
}

// nvidiaLeftovers lists what the NVIDIA plugin of a node still holds:
// checkpoint entries, CDI specs and MIG instances.
func (e *env) nvidiaLeftovers(nodeName string) []string {
	e.t.Helper()
	var out []string
	for uid := range e.checkpointClaims(nodeName, nvidia.DriverName) {
		out = append(out, "checkpoint claim "+uid)
	}
	specs, _ := filepath.Glob(filepath.Join(e.node(nodeName).Env.CDIDir, "*.json"))
	for _, s := range specs {
		out = append(out, "CDI spec "+filepath.Base(s))
	}
	for gpu, n := range e.hardware(nodeName).NVML.MIGInstances() {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d MIG instances on GPU %d", n, gpu))
		}
	}
	for _, uuid := range e.hardware(nodeName).MPS.Running() {
		out = append(out, "MPS daemon on "+uuid)
	}
	return out
}

// gpuNodes picks the GPU device nodes (/dev/nvidiaN) out of a container's
// device nodes.
func gpuNodes(paths []string) []string {
	var out []string
	for _, p := range paths {
		if rest, ok := strings.CutPrefix(p, "/dev/nvidia"); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			out = append(out, p)
		}
	}
	return out
}

// describePods renders pods' phase, node and conditions, for failure
// messages.
func (e *env) describePods(ns string, names ...string) string {
	var b strings.Builder
	for _, name := range names {
		p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(&b, "\n%s: %v", name, err)
			continue
		}
		fmt.Fprintf(&b, "\n%s: phase %s node %q nominated %q", name, p.Status.Phase, p.Spec.NodeName, p.Status.NominatedNodeName)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "; %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return b.String()
}

// describeOthers lists, for a failure seen only now and then, the pods of
// the namespace not named and every ResourceClaim: who holds the room.
func (e *env) describeOthers(ns string, skip []string) string {
	var b strings.Builder
	pods, err := e.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		if !slices.Contains(skip, p.Name) {
			fmt.Fprintf(&b, "\npod %s: phase %s node %q deleting %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil)
		}
	}
	claims, err := e.client.ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return b.String() + "\n" + err.Error()
	}
	for _, c := range claims.Items {
		var users []string
		for _, r := range c.Status.ReservedFor {
			users = append(users, r.Name)
		}
		fmt.Fprintf(&b, "\nclaim %s: allocated %v, reserved for %v, deleting %v", c.Name, c.Status.Allocation != nil, users, c.DeletionTimestamp != nil)
	}
	return b.String()
}
