package gang

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// onceSatisfiedGang makes members of a once-satisfied gang of minMember
// 3, named <gang>-<prefix><i>.
func onceSatisfiedGang(prefix string, n int) []*corev1.Pod {
	pods := annotatedGang("job", n, "1h")
	for i, pod := range pods {
		pod.Name = fmt.Sprintf("job-%s%d", prefix, i)
		pod.UID = types.UID("uid-" + pod.Name)
		pod.Annotations[AnnotationPrefix+KeyMinAvailable] = "3"
		pod.Annotations[AnnotationPrefix+KeyMatchPolicy] = MatchOnceSatisfied
	}
	return pods
}

// runGang lets the members of a once-satisfied gang go together and
// binds them.
func runGang(t *testing.T, p *Plugin, h *fakeHandle, pods []*corev1.Pod) {
	t.Helper()
	for i, m := range pods {
		st := permit(t, p, h, m)
		if last := i == len(pods)-1; last != st.IsSuccess() {
			t.Fatalf("%s: %v", m.Name, st)
		}
	}
	for _, m := range pods {
		delete(h.waiting, m.UID)
		bound := m.DeepCopy()
		bound.Spec.NodeName = "node-a"
		if err := p.podIndex.Update(bound); err != nil {
			t.Fatal(err)
		}
		p.forgetPod(m.UID)
	}
}

// terminate marks pods deleted; they stay in the informer until their
// containers stop.
func terminate(t *testing.T, p *Plugin, pods ...*corev1.Pod) {
	t.Helper()
	for _, m := range pods {
		obj, _, _ := p.podIndex.Get(m)
		gone := obj.(*corev1.Pod).DeepCopy()
		gone.DeletionTimestamp = &metav1.Time{}
		if err := p.podIndex.Update(gone); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOnceSatisfiedLastsAsLongAsTheIncarnation: a once-satisfied gang
// that ran takes a replacement member at once while members of that run
// live; a gang whose pods were all replaced (a training operator
// restarting the job while the old pods still terminate) must reach
// minMember again.
func TestOnceSatisfiedLastsAsLongAsTheIncarnation(t *testing.T) {
	old := onceSatisfiedGang("a", 3)
	p, h := newTestPlugin(t, old)
	runGang(t, p, h, old)

	// One member fails and is replaced: the run goes on.
	terminate(t, p, old[1])
	replacement := onceSatisfiedGang("r", 1)[0]
	if err := p.podIndex.Add(replacement); err != nil {
		t.Fatal(err)
	}
	if st := permit(t, p, h, replacement); !st.IsSuccess() {
		t.Fatalf("replacement of one member of a running gang: %v, want Success", st)
	}

	// The job restarts: every pod of the run terminates and new ones
	// come, while the old ones are still there.
	terminate(t, p, old[0], old[2], replacement)
	restarted := onceSatisfiedGang("b", 3)
	for _, m := range restarted {
		if err := p.podIndex.Add(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range restarted[:2] {
		if st := permit(t, p, h, m); st.Code() != fwk.Wait {
			t.Errorf("%s of the restarted job: %v, want Wait for minMember", m.Name, st)
		}
	}
	if st := permit(t, p, h, restarted[2]); !st.IsSuccess() {
		t.Fatalf("last member of the restarted job: %v, want Success", st)
	}
	for _, m := range restarted[:2] {
		if wp := h.waiting[m.UID]; wp == nil || !wp.allowed {
			t.Errorf("%s was not let go with its gang", m.Name)
		}
	}
}
