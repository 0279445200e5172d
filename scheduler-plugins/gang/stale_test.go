package gang

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/strata-sh/strata/internal/testutil"
	dct "github.com/strata-sh/strata/scheduler-plugins/internal/devicecount/devicecounttest"
)

// TestStaleClaimsOfAMemberAreGivenBack: members that went through PreBind
// and did not bind keep what it wrote. When such a member cannot be
// placed, StrataGang's PostFilter (which ends the chain before
// DynamicResources' does) gives it back: train-0's claim, allocated on
// gpu-0 and reserved for train-0 alone, is deallocated; train-2's claim
// for its nvidia.com/gpu, created by an earlier cycle, is deleted (its
// delete protection first). train-1's claim, shared with a running pod,
// is left alone, and so is what a bound member holds.
func TestStaleClaimsOfAMemberAreGivenBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var c gpuCluster
	c.node("gpu-0", nil)
	mk := func(name string) *corev1.Pod {
		pod := testutil.MakePod(name).Req("1", "1Gi").Obj()
		pod.UID = types.UID(name)
		pod.Annotations = map[string]string{AnnotationPrefix + KeyName: "train", AnnotationPrefix + KeyMinAvailable: "4"}
		c.pods = append(c.pods, pod)
		return pod
	}
	claimed := func(pod *corev1.Pod, gpus []int, reservedFor ...types.UID) *corev1.Pod {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(pod.Name + "-gpus")}}
		claim := dct.Allocate(testutil.MakeClaimSpec().Request("gpus", upstreamGPUClass, int64(len(gpus))).Claim("default", pod.Name+"-gpus"), "gpu-0", gpus...)
		for _, uid := range reservedFor {
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: string(uid), UID: uid})
		}
		c.claims = append(c.claims, claim)
		return pod
	}
	stale := claimed(mk("train-0"), []int{0, 1}, "train-0")
	shared := claimed(mk("train-1"), []int{2, 3}, "runner")
	extended := mk("train-2")
	extended.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("2")
	special := dct.Allocate(testutil.MakeClaimSpec().Request("container-0-request-0", upstreamGPUClass, 2).Claim("default", "train-2-extended-resources-x7k2p"), "gpu-0", 4, 5)
	special.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	special.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "train-2", UID: "train-2", Controller: ptr.To(true)}}
	special.Finalizers = []string{resourceapi.Finalizer}
	special.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "train-2", UID: "train-2"}}
	c.claims = append(c.claims, special)
	bound := claimed(mk("train-3"), []int{6, 7}, "train-3")
	bound.Spec.NodeName = "gpu-0"
	p, cs := c.start(t)

	for _, pod := range []*corev1.Pod{stale, shared, extended, bound} {
		p.releaseStaleClaims(ctx, pod)
	}
	claim := func(name string) (*resourceapi.ResourceClaim, error) {
		return cs.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		c, err := claim("train-0-gpus")
		if err != nil {
			return false, err
		}
		_, err = claim(special.Name)
		return c.Status.Allocation == nil && len(c.Status.ReservedFor) == 0 && apierrors.IsNotFound(err), nil
	})
	if err != nil {
		c0, _ := claim("train-0-gpus")
		_, errSpecial := claim(special.Name)
		t.Fatalf("train-0's claim %+v and train-2's extended resources claim (%v): want deallocated and deleted: %v", c0.Status, errSpecial, err)
	}
	for _, name := range []string{"train-1-gpus", "train-3-gpus"} {
		if c, err := claim(name); err != nil || c.Status.Allocation == nil {
			t.Errorf("claim %s given back (%v); it is in use", name, err)
		}
	}
	waitReleased(t, p)
	if n := countActions(cs, "delete"); n != 1 {
		t.Errorf("%d deletes, want 1", n)
	}
}

// waitReleased waits until no release is in flight.
func waitReleased(t *testing.T, p *Plugin) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		busy := false
		p.stale.inFlight.Range(func(any, any) bool { busy = true; return false })
		return !busy, nil
	})
	if err != nil {
		t.Fatal("claims still being given back")
	}
}

func countActions(cs *fake.Clientset, verb string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "resourceclaims" {
			n++
		}
	}
	return n
}
