package realnode

import (
	"errors"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// RunStaticPod makes the node's kubelet run pod as a static pod (its
// mirror pod in the API server is named <name>-<node>). Writing the same
// name again replaces the pod, as a changed manifest does.
func (n *Node) RunStaticPod(pod *corev1.Pod) error {
	pod = pod.DeepCopy()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	raw, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	path := filepath.Join(n.ManifestsDir(), pod.Name+".yaml")
	// The kubelet reads the folder every second: never let it see half a
	// file.
	tmp := filepath.Join(n.Dir, "."+pod.Name+".yaml")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// RemoveStaticPod stops a static pod.
func (n *Node) RemoveStaticPod(name string) error {
	err := os.Remove(filepath.Join(n.ManifestsDir(), name+".yaml"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// PluginPod turns the pod template of a kubelet plugin's DaemonSet, as
// the chart renders it, into the static pod a real node of the harness
// runs: the same image, arguments, environment, mounts and security
// context, with two differences a DaemonSet pod would not have. A static
// pod cannot use a service account, so the plugin gets kubeconfig (at
// the same path, mounted read-only) instead of its token; and it runs on
// the host network, because the harness's nodes have no pod network.
func PluginPod(name, namespace string, tmpl corev1.PodTemplateSpec, kubeconfig string) *corev1.Pod {
	spec := *tmpl.Spec.DeepCopy()
	spec.ServiceAccountName = ""
	spec.AutomountServiceAccountToken = new(bool)
	spec.HostNetwork = true
	spec.Affinity = nil
	spec.NodeSelector = nil
	c := &spec.Containers[0]
	c.Args = append(c.Args, "--kubeconfig="+kubeconfig)
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "strata-kubeconfig", MountPath: kubeconfig, ReadOnly: true})
	file := corev1.HostPathFile
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "strata-kubeconfig", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: kubeconfig, Type: &file},
	}})
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: tmpl.Labels},
		Spec:       spec,
	}
}
