package gang

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	fwk "k8s.io/kube-scheduler/framework"
)

// A member refused while its generated claims were not yet named in its
// status is queued again when the ResourceClaim controller names them,
// its own or another member's; other status changes do not requeue it.
func TestHintPodUpdatedOnGeneratedClaims(t *testing.T) {
	pods := annotatedGang("g", 2, "30s")
	p, _ := newTestPlugin(t, pods)
	logger, _ := ktesting.NewTestContext(t)
	withClaims := func(pod *corev1.Pod) *corev1.Pod {
		c := pod.DeepCopy()
		c.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To(pod.Name + "-gpus-x1")}}
		return c
	}
	withCondition := func(pod *corev1.Pod) *corev1.Pod {
		c := pod.DeepCopy()
		c.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}}
		return c
	}
	outsider := annotatedGang("other", 1, "30s")[0]
	for name, tc := range map[string]struct {
		old, new *corev1.Pod
		want     fwk.QueueingHint
	}{
		"own claims named":         {pods[0], withClaims(pods[0]), fwk.Queue},
		"a member's claims named":  {pods[1], withClaims(pods[1]), fwk.Queue},
		"own condition changed":    {pods[0], withCondition(pods[0]), fwk.QueueSkip},
		"outsider's claims named":  {outsider, withClaims(outsider), fwk.QueueSkip},
		"claims named, then again": {withClaims(pods[0]), withClaims(pods[0]), fwk.QueueSkip},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := p.hintPodUpdated(logger, pods[0], tc.old, tc.new)
			if err != nil || got != tc.want {
				t.Errorf("hint = %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}
