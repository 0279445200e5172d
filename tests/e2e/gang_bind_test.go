package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/testutil"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
)

// refuseBindings installs a ValidatingAdmissionPolicy that refuses to bind
// the named pod (a real API error in the scheduler's Bind), and waits
// until the API server enforces it.
func (e *env) refuseBindings(pod string) (remove func()) {
	e.t.Helper()
	adm := e.client.AdmissionregistrationV1()
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-binding"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.name != %q && !object.metadata.name.startsWith('policy-probe')", pod),
				Message:    "injected bind failure",
			}},
		},
	}
	e.denyWith(policy)
	// Policies take effect asynchronously: bind probe pods (scheduled by
	// no one) until one is refused.
	i := 0
	e.eventually(30*time.Second, "binding policy enforced", func(ctx context.Context) (bool, error) {
		name := fmt.Sprintf("policy-probe-%d", i)
		i++
		e.createPod(testutil.MakePod(name).Scheduler("nobody").Obj())
		err := e.client.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Target: corev1.ObjectReference{Kind: "Node", Name: "gpu-0"}}, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "injected bind failure"), nil
	})
	return func() {
		if err := adm.ValidatingAdmissionPolicyBindings().Delete(e.ctx, "refuse-binding", metav1.DeleteOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// denyWith creates a ValidatingAdmissionPolicy and a binding of the same
// name that denies what it refuses. Policies take effect asynchronously:
// the caller probes until one is enforced.
func (e *env) denyWith(policy *admissionv1.ValidatingAdmissionPolicy) {
	e.t.Helper()
	adm := e.client.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(e.ctx, policy, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestBindFailureAfterGangIsLetGo: one member of a 4-member GPU gang
// cannot be bound (an admission policy refuses it) after Permit let the
// gang go. The PodGroup says so; the three members that bound stay bound
// and keep their GPUs; once the policy is gone the fourth binds beside
// them and the gang is Scheduled again.
func TestBindFailureAfterGangIsLetGo(t *testing.T) {
	e := startCluster(t, twoBlocks(2))
	allow := e.refuseBindings("bf-2")
	e.gang("bf", 4, 4, 8, nil)
	var msg string
	e.waitPodGroup("bf", "bind failure reported", 60*time.Second, func(_ *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		if c == nil || c.Reason != gang.ReasonBindFailed {
			return false
		}
		msg = c.Message
		return true
	})
	if !strings.Contains(msg, "member bf-2 failed to bind") {
		t.Errorf("condition %q does not name the member", msg)
	}
	// The other members bind on their own goroutines: one may still be
	// binding when bf-2's failure is reported.
	var bound map[string]string
	e.eventually(30*time.Second, "bf-0, bf-1 and bf-3 bound", func(context.Context) (bool, error) {
		bound = map[string]string{}
		for _, p := range e.gangPods("bf") {
			if p.Spec.NodeName != "" {
				bound[p.Name] = p.Spec.NodeName
			}
		}
		if bound["bf-2"] != "" {
			return false, fmt.Errorf("bf-2 bound to %s although its binding is refused", bound["bf-2"])
		}
		return len(bound) == 3, nil
	})
	allow()
	e.eventually(60*time.Second, "bf-2 bound", func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods("default").Get(ctx, "bf-2", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", err
	})
	pods := e.waitGangRunning("bf", 4)
	for _, p := range pods {
		if was, ok := bound[p.Name]; ok && was != p.Spec.NodeName {
			t.Errorf("%s moved from %s to %s", p.Name, was, p.Spec.NodeName)
		}
		if n := len(e.claimResults(&p, "gpus")); n != 8 {
			t.Errorf("%s holds %d GPUs, want 8", p.Name, n)
		}
	}
	e.waitPodGroup("bf", "gang scheduled again", 30*time.Second, func(pg *schedulingv1alpha1.PodGroup, c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && pg.Status.Phase == schedulingv1alpha1.PodGroupRunning
	})
}
