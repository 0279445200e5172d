package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/testutil"
	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
	"github.com/strata-sh/strata/scheduler-plugins/config"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/controlplane"
)

// watchGangHandle returns control plane options whose scheduler's gang
// plugin hands over its framework handle, through which a test sees the
// members waiting in Permit.
func watchGangHandle() (controlplane.Options, func() fwk.Handle) {
	var mu sync.Mutex
	var last fwk.Handle
	registry := schedulerplugins.Registry()
	newGang := registry[gang.Name]
	registry[gang.Name] = func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		mu.Lock()
		last = h
		mu.Unlock()
		return newGang(ctx, obj, h)
	}
	return controlplane.Options{Plugins: registry}, func() fwk.Handle {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

func (e *env) createNamespace(name string) {
	e.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.client.CoreV1().Namespaces().Create(e.ctx, ns, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create namespace %s: %v", name, err)
	}
}

func (e *env) createPodGroup(ns, name string, minMember int32, annotations map[string]string) {
	e.t.Helper()
	pg := &schedulingv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       schedulingv1alpha1.PodGroupSpec{MinMember: minMember, ScheduleTimeoutSeconds: ptr.To[int32](600)},
	}
	if err := e.crClient().Create(e.ctx, pg); err != nil {
		e.t.Fatalf("create PodGroup %s/%s: %v", ns, name, err)
	}
}

// TestGangOfAnotherNamespaceIsLeftAlone: a tenant lists another
// namespace's gang in its groups annotation, with admission off (the
// webhook and the annotation policy refuse that; objects made without
// them are the scheduler's to judge). Its member that cannot be placed
// goes through the scheduler while the other tenant's members wait in
// Permit: they stay waiting, and the listing gang is told why it is
// refused.
func TestGangOfAnotherNamespaceIsLeftAlone(t *testing.T) {
	opts, handle := watchGangHandle()
	e := startSim(t, twoBlocks(2), sim.Config{ControlPlane: opts, ChartValues: map[string]any{
		"controller": map[string]any{"webhook": map[string]any{"enabled": false}},
		"policies":   map[string]any{"gangAnnotations": false},
	}})
	e.createNamespace("team-a")
	e.createNamespace("team-b")

	// team-b's gang "train" waits in Permit for its group's "gate", whose
	// one member is held back by a scheduling gate.
	group := map[string]string{"scheduling.strata.sh/groups": `["train", "gate"]`}
	e.createPodGroup("team-b", "train", 2, group)
	e.createPodGroup("team-b", "gate", 1, group)
	gated := testutil.MakePod("gate-0").Namespace("team-b").Scheduler(config.ProfileName).
		Label(schedulingv1alpha1.PodGroupLabel, "gate").Req("1", "1Gi").Obj()
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
	e.createPod(gated)
	for _, name := range []string{"train-0", "train-1"} {
		e.createPod(testutil.MakePod(name).Namespace("team-b").Scheduler(config.ProfileName).
			Label(schedulingv1alpha1.PodGroupLabel, "train").Req("1", "1Gi").Obj())
	}
	waiting := func() []string {
		var names []string
		if h := handle(); h != nil {
			h.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
				if p := wp.GetPod(); p.Namespace == "team-b" {
					names = append(names, p.Name)
				}
			})
		}
		return names
	}
	e.eventually(time.Minute, "team-b's train members waiting in Permit", func(context.Context) (bool, error) {
		return len(waiting()) == 2, nil
	})

	// team-a's gang lists team-b/train; its one member fits nowhere.
	e.createPodGroup("team-a", "a", 1, map[string]string{"gang.scheduling.koordinator.sh/groups": `["a", "team-b/train"]`})
	e.createPod(testutil.MakePod("a-0").Namespace("team-a").Scheduler(config.ProfileName).
		Label(schedulingv1alpha1.PodGroupLabel, "a").Req("10000", "1Gi").Obj())

	cr := e.crClient()
	var said string
	e.eventually(time.Minute, "team-a's gang told why it is refused", func(ctx context.Context) (bool, error) {
		var pg schedulingv1alpha1.PodGroup
		if err := cr.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "a"}, &pg); err != nil {
			return false, err
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == schedulingv1alpha1.ConditionScheduled && c.Status == metav1.ConditionFalse {
				said = c.Reason + ": " + c.Message
				return true, nil
			}
		}
		return false, nil
	})
	want := `"team-b/train" is a gang of namespace "team-b"; a group lists only gangs of its own namespace, "team-a"`
	if !strings.Contains(said, gang.ReasonInvalidGang) || !strings.Contains(said, want) {
		t.Errorf("team-a's PodGroup says %q, want %s with %q", said, gang.ReasonInvalidGang, want)
	}
	// Give a wrongly acting scheduler time to retry a-0 and reject again.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if w := waiting(); len(w) != 2 {
			t.Fatalf("team-b's waiting members are %v after team-a's member failed, want train-0 and train-1 still waiting", w)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, name := range []string{"train-0", "train-1"} {
		p, err := e.client.CoreV1().Pods("team-b").Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if strings.Contains(c.Message, "team-a") {
				t.Errorf("team-b/%s was touched by team-a's gang: %s", name, c.Message)
			}
		}
	}
	var pg schedulingv1alpha1.PodGroup
	if err := cr.Get(e.ctx, client.ObjectKey{Namespace: "team-b", Name: "train"}, &pg); err != nil {
		t.Fatal(err)
	}
	for _, c := range pg.Status.Conditions {
		if strings.Contains(c.Message, "team-a") {
			t.Errorf("team-b/train's PodGroup was written by team-a's gang: %s", c.Message)
		}
	}
}

// TestGangGroupsStayInTheirNamespaceAtAdmission: a groups annotation that
// names another namespace's gang is refused with the annotation and the
// entry named (the policy answers before the webhook, which refuses it
// too: controller/admission's TestMistakesAreRefusedWithTheirField), also
// while the webhook is down, escaped or not; a group of the namespace's
// own gangs is accepted by both.
func TestGangGroupsStayInTheirNamespaceAtAdmission(t *testing.T) {
	e := startCluster(t, oneH100MIGNode)
	pgWith := func(name, groups string) string {
		return "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: " + name +
			"\n  annotations:\n    scheduling.strata.sh/groups: '" + groups + "'\nspec:\n  minMember: 1\n"
	}
	if err := e.applyYAML("own group", pgWith("ps", `["default/ps", "workers"]`)); err != nil {
		t.Fatalf("a group of the namespace's own gangs is refused: %v", err)
	}
	if err := e.applyYAML("own group pod", podWith("own", `gang.scheduling.koordinator.sh/groups: '["default/ps", "workers"]'`)); err != nil {
		t.Fatalf("a pod with a group of the namespace's own gangs is refused: %v", err)
	}
	err := e.applyYAML("foreign group", pgWith("steal", `["steal", "team-b/train"]`))
	if err == nil || !strings.Contains(err.Error(), "metadata.annotations[scheduling.strata.sh/groups]") || !strings.Contains(err.Error(), `"team-b/train"`) {
		t.Errorf("PodGroup listing team-b/train: %v, want a refusal naming the annotation and the entry", err)
	}

	e.sim.StopController()
	for name, groups := range map[string]string{
		"foreign":         `["team-b/train"]`,
		"foreign escaped": `["team-b\u002ftrain"]`,
	} {
		err := e.applyYAML(name, podWith("steal", `gang.scheduling.koordinator.sh/groups: '`+groups+`'`))
		if err == nil || !strings.Contains(err.Error(), "metadata.annotations[gang.scheduling.koordinator.sh/groups]") {
			t.Errorf("%s group with the webhook down: %v, want the policy's refusal", name, err)
		}
		if name == "foreign" && err != nil && !strings.Contains(err.Error(), `"team-b/train" is a gang of another namespace`) {
			t.Errorf("policy's refusal does not name the entry: %v", err)
		}
	}
}
