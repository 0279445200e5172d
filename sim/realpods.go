package sim

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/node"
)

// ProbeScript is what every container runs on a cluster with real nodes:
// it prints the character devices, the accelerator and fabric
// environment and the mounts the container has, then sleeps. The workloads'
// own images are not on this machine (no registry is reached); strata-sim
// runs its local busybox image in their place, with the workloads'
// claims, requests and placement unchanged.
const ProbeScript = `find /dev -type c 2>/dev/null | sort | sed 's/^/dev /'; ` +
	`env | sort | grep -E '^(NVIDIA|CUDA|ASCEND|CAMBRICON|NCCL|UCX)_' | sed 's/^/env /'; ` +
	`cut -d' ' -f5 /proc/self/mountinfo | sort | sed 's/^/mount /'; echo probed; exec sleep 2147483647`

// probedMarker marks the end of the probe's output.
const probedMarker = "probed"

// forRealNodes returns objs with every pod template made to run on a real
// node: each container (init containers too) runs ProbeScript in the
// busybox image, on the host network (real nodes have no pod network),
// without CPU and memory requests. Claims, extended resources and
// scheduling fields stay as written.
func forRealNodes(objs []apply.Object) []apply.Object {
	out := make([]apply.Object, len(objs))
	for i, o := range objs {
		o.Unstructured = o.DeepCopy()
		for _, path := range [][]string{{"spec"}, {"spec", "template", "spec"}, {"spec", "jobTemplate", "spec", "template", "spec"}} {
			spec, found, _ := unstructured.NestedMap(o.Object, path...)
			if !found || spec["containers"] == nil {
				continue
			}
			if o.GetKind() != "Pod" && len(path) == 1 {
				continue
			}
			probePodSpec(spec)
			_ = unstructured.SetNestedMap(o.Object, spec, path...)
		}
		out[i] = o
	}
	return out
}

func probePodSpec(spec map[string]any) {
	spec["hostNetwork"] = true
	spec["terminationGracePeriodSeconds"] = int64(1)
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := spec[key].([]any)
		for _, c := range list {
			m, ok := c.(map[string]any)
			if !ok {
				continue
			}
			m["image"] = "busybox"
			m["imagePullPolicy"] = string(corev1.PullIfNotPresent)
			m["command"] = []any{"sh", "-c", ProbeScript}
			delete(m, "args")
			if key == "initContainers" {
				m["command"] = []any{"sh", "-c", strings.TrimSuffix(ProbeScript, "; exec sleep 2147483647")}
			}
			// Real nodes have this machine's CPUs and memory, not a
			// server's: requests and limits of CPU and memory are
			// dropped (devices, claims and placement rules stay).
			if res, ok := m["resources"].(map[string]any); ok {
				for _, k := range []string{"requests", "limits"} {
					if q, ok := res[k].(map[string]any); ok {
						delete(q, "cpu")
						delete(q, "memory")
					}
				}
			}
			// The probe has no port to check.
			for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
				delete(m, probe)
			}
		}
	}
}

// standardDevices and standardMounts are what every container has,
// left out of what a container saw.
var (
	standardDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/console", "/dev/ptmx"}
	standardMounts  = []string{"/", "/proc", "/dev", "/dev/pts", "/dev/mqueue", "/dev/shm", "/sys", "/sys/fs/cgroup", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/termination-log"}
)

// ParseProbe reads ProbeScript's output into what the container saw; ok
// is false until the probe has finished.
func ParseProbe(out string) (c node.Container, ok bool) {
	for _, line := range strings.Split(out, "\n") {
		kind, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch kind {
		case "dev":
			if !slices.Contains(standardDevices, value) && !strings.HasPrefix(value, "/dev/pts/") {
				c.DeviceNodes = append(c.DeviceNodes, value)
			}
		case "env":
			c.Env = append(c.Env, value)
		case "mount":
			if !slices.Contains(standardMounts, value) && !strings.HasPrefix(value, "/sys/fs/cgroup/") && !strings.HasPrefix(value, "/proc/") &&
				!strings.HasPrefix(value, "/var/run/secrets/") && !strings.HasPrefix(value, "/sys/firmware") {
				c.Mounts = append(c.Mounts, value)
			}
		case probedMarker:
			ok = true
		}
	}
	c.Observed = true
	return c, ok
}

// containersOf is the report's view of a pod's containers: on a real
// node what each container printed (ProbeScript), on a simulated node
// what the simulated runtime injected.
func (s *Sim) containersOf(ctx context.Context) func(*corev1.Pod) map[string]node.Container {
	real := map[string]bool{}
	for _, n := range s.realNodes {
		real[n.Name()] = true
	}
	return func(pod *corev1.Pod) map[string]node.Container {
		if !real[pod.Spec.NodeName] {
			return s.Nodes.Containers(pod.UID)
		}
		out := map[string]node.Container{}
		for _, c := range pod.Spec.Containers {
			raw, err := s.ControlPlane.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			if err != nil {
				continue
			}
			if seen, ok := ParseProbe(string(raw)); ok {
				out[c.Name] = seen
			}
		}
		return out
	}
}
