package nvidia

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Labels of MPS daemon pods.
const (
	MPSPodNameLabel = "app.kubernetes.io/name"
	MPSPodName      = "strata-mps-control-daemon"
	MPSPodGPULabel  = "nvidia.strata.sh/gpu"
	// MPSDriverRootMount is where a daemon pod sees the host's driver
	// root, as the plugin's container does.
	MPSDriverRootMount = "/driver-root"
)

// PodMPS runs each GPU's MPS control daemon in a pod of its own on the
// node, made through the API server: a restart, OOM kill or rolling update
// of the plugin's pod leaves the daemons, and the MPS servers of running
// containers, alone. The plugin talks to a daemon through its pipe
// directory, which the daemon's pod mounts from the host at the same
// path; the pod's liveness probe talks to it too, so a wedged daemon is
// restarted by the kubelet.
type PodMPS struct {
	// Exec talks to the daemons (its Command, StateDir and LibraryDir are
	// the daemon pods' too).
	Exec ExecMPS
	// Client makes the pods in Namespace, bound to NodeName (owned by the
	// node, whose UID is NodeUID, so that they go with it).
	Client    kubernetes.Interface
	Namespace string
	NodeName  string
	NodeUID   types.UID
	// Image is the daemon pods' image (the plugin's), and DaemonCommand
	// the command in it that runs a daemon (the plugin binary's
	// mps-daemon command), given the daemon's settings as flags.
	Image            string
	ImagePullSecrets []string
	DaemonCommand    []string
	// DriverRoot, if set, is the host's driver root, mounted read-only at
	// MPSDriverRootMount.
	DriverRoot        string
	PriorityClassName string
}

var _ MPSControl = &PodMPS{}

// PodName is the name of the daemon pod of a GPU.
func (p *PodMPS) PodName(gpuUUID string) string {
	return "strata-mps-" + strings.ToLower(gpuUUID)
}

// Ensure implements MPSControl: a daemon that answers is kept; otherwise
// its pod is made (again) and waited for until the daemon answers.
func (p *PodMPS) Ensure(ctx context.Context, gpuUUID, dir string) error {
	d := MPSDaemon{GPU: gpuUUID, Dir: dir}
	if p.Exec.answers(ctx, d) == nil {
		return nil
	}
	pods := p.Client.CoreV1().Pods(p.Namespace)
	name := p.PodName(d.GPU)
	var last *corev1.Pod
	answers := func(ctx context.Context, d MPSDaemon) error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			last = nil
			// A pipe directory without a pod is what a daemon that died
			// left: the new one starts clean.
			if err := os.RemoveAll(d.PipeDir()); err != nil {
				return err
			}
			if _, err := pods.Create(ctx, p.pod(d), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create MPS daemon pod %s/%s: %w", p.Namespace, name, err)
			}
			return fmt.Errorf("MPS daemon pod %s/%s created", p.Namespace, name)
		case err != nil:
			return err
		}
		last = pod
		if pod.DeletionTimestamp == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
			// The daemon quit or failed for good: a new pod replaces it.
			err := pods.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return fmt.Errorf("MPS daemon pod %s/%s ended (%s), replacing it", p.Namespace, name, pod.Status.Phase)
		}
		if pod.DeletionTimestamp != nil {
			return fmt.Errorf("MPS daemon pod %s/%s is being deleted", p.Namespace, name)
		}
		return p.Exec.answers(ctx, d)
	}
	return waitAnswer(ctx, d, answers, func() string { return podSummary(last) })
}

// podSummary says where a daemon pod is, for errors.
func podSummary(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	s := fmt.Sprintf(" (pod %s/%s: %s", pod.Namespace, pod.Name, pod.Status.Phase)
	for _, c := range pod.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf(", %s: %s", c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf(", exited %d: %s", c.State.Terminated.ExitCode, c.State.Terminated.Reason)
		}
		if c.RestartCount > 0 {
			s += fmt.Sprintf(", %d restarts", c.RestartCount)
		}
	}
	return s + ")"
}

// Stop implements MPSControl: the daemon is asked to quit, its pod
// deleted and its pipe directory removed.
func (p *PodMPS) Stop(ctx context.Context, gpuUUID, dir string) error {
	d := MPSDaemon{GPU: gpuUUID, Dir: dir}
	if p.Exec.answers(ctx, d) == nil {
		if _, err := p.Exec.call(ctx, d.PipeDir(), "quit"); err != nil {
			return err
		}
	}
	err := p.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.PodName(d.GPU), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete MPS daemon pod %s/%s: %w", p.Namespace, p.PodName(d.GPU), err)
	}
	return os.RemoveAll(d.PipeDir())
}

// List implements MPSControl: the daemon pods of the node, and pipe
// directories without a pod.
func (p *PodMPS) List(ctx context.Context) (map[string]bool, error) {
	pods, err := p.Client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{MPSPodNameLabel: MPSPodName}).String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", p.NodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list MPS daemon pods: %w", err)
	}
	out, err := p.Exec.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, pod := range pods.Items {
		if gpu := pod.Labels[MPSPodGPULabel]; gpu != "" {
			if _, ok := out[gpu]; !ok {
				out[gpu] = p.Exec.answers(ctx, MPSDaemon{GPU: gpu, Dir: MPSDir(p.Exec.StateDir, gpu)}) == nil
			}
		}
	}
	return out, nil
}

// pod is the daemon pod of d: privileged (the GPU's device nodes), the
// daemon's directory from the host at the same path, restarted by the
// kubelet when the daemon fails or stops answering, not when it quits.
func (p *PodMPS) pod(d MPSDaemon) *corev1.Pod {
	args := append([]string{}, p.DaemonCommand...)
	args = append(args, "--gpu-uuid="+d.GPU, "--dir="+d.Dir)
	if p.Exec.LibraryDir != "" {
		args = append(args, "--library-dir="+p.Exec.LibraryDir)
	}
	args = append(args, "--")
	args = append(args, p.Exec.command()...)
	probe := append(append([]string{}, args[:len(p.DaemonCommand)]...), "--probe")
	probe = append(probe, args[len(p.DaemonCommand):]...)
	hostDir := corev1.HostPathDirectoryOrCreate
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.PodName(d.GPU),
			Namespace: p.Namespace,
			Labels:    map[string]string{MPSPodNameLabel: MPSPodName, MPSPodGPULabel: d.GPU},
		},
		Spec: corev1.PodSpec{
			NodeName: p.NodeName,
			// The daemon talks through its pipe directory only: no pod IP,
			// and no dependence on the node's network plugin.
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			PriorityClassName:             p.PriorityClassName,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            "mps-control-daemon",
				Image:           p.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         args,
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: probe}},
					PeriodSeconds:    20,
					TimeoutSeconds:   int32(MPSCallTimeout.Seconds()) + 5,
					FailureThreshold: 3,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "mps", MountPath: d.Dir}},
			}},
			Volumes: []corev1.Volume{{Name: "mps", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: d.Dir, Type: &hostDir}}}},
		},
	}
	for _, s := range p.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if p.NodeUID != "" {
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: p.NodeName, UID: p.NodeUID}}
	}
	if p.DriverRoot != "" {
		dir := corev1.HostPathDirectory
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "driver-root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p.DriverRoot, Type: &dir}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "driver-root", MountPath: MPSDriverRootMount, ReadOnly: true})
	}
	return pod
}
