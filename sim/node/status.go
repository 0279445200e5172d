package node

import (
	"context"
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// markRunning writes the status kubelet reports once all containers of a
// pod started.
func (m *Manager) markRunning(ctx context.Context, n *Node, pod *corev1.Pod, devices map[string][]preparedDevice) error {
	now := metav1.Now()
	updated := pod.DeepCopy()
	st := &updated.Status
	st.Phase = corev1.PodRunning
	st.HostIP = nodeIP(n.Spec.Name)
	st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	st.PodIP = podIP(pod)
	st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setCondition(st, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     c.Image,
			ContainerID: fmt.Sprintf("strata-sim://%s-%s", pod.UID, c.Name),
			Ready:       true,
			Started:     ptrTrue(),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	n.withResourceHealth(st, pod, devices)
	if _, err := m.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update pod status: %w", err)
	}
	m.recorder(n.Spec.Name).Event(pod, corev1.EventTypeNormal, ReasonStarted, "Started containers on simulated node")
	return nil
}

func setCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			if st.Conditions[i].Status != c.Status {
				st.Conditions[i] = c
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

// nodeIP and podIP derive stable fake addresses from names.
func nodeIP(node string) string {
	h := hash(node)
	return fmt.Sprintf("10.%d.%d.%d", 64+(h>>16)%64, (h>>8)%256, 1+h%254)
}

func podIP(pod *corev1.Pod) string {
	h := hash(string(pod.UID))
	return fmt.Sprintf("172.%d.%d.%d", 16+(h>>16)%16, (h>>8)%256, 1+h%254)
}

func hash(s string) uint32 {
	f := fnv.New32a()
	f.Write([]byte(s))
	return f.Sum32()
}

func ptrTrue() *bool { b := true; return &b }
