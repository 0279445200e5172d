package gang

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/gangspec"
	"github.com/strata-sh/strata/internal/topotree"
)

// Annotations of PodGroups (and, for gangs without a PodGroup, of pods).
// Each Strata key has a Koordinator alias, so manifests written for
// Koordinator work unchanged apart from schedulerName. Package gangspec
// reads them; see it for each key's meaning.
const (
	AnnotationPrefix = schedulingv1alpha1.AnnotationPrefix
	KoordPrefix      = schedulingv1alpha1.KoordinatorAnnotationPrefix

	KeyNetworkTopologySpec  = gangspec.KeyNetworkTopologySpec
	KeyGroups               = gangspec.KeyGroups
	KeyMatchPolicy          = gangspec.KeyMatchPolicy
	KeyName                 = gangspec.KeyName
	KeyMinAvailable         = gangspec.KeyMinAvailable
	KeyWaitingTime          = gangspec.KeyWaitingTime
	KeyMode                 = gangspec.KeyMode
	KeyTotalNumber          = gangspec.KeyTotalNumber
	KeyNetworkTopologyIndex = gangspec.KeyNetworkTopologyIndex
)

// Gang modes.
const (
	ModeStrict    = gangspec.ModeStrict
	ModeNonStrict = gangspec.ModeNonStrict
)

// Match policies.
const (
	MatchOnlyWaiting       = gangspec.MatchOnlyWaiting
	MatchWaitingAndRunning = gangspec.MatchWaitingAndRunning
	MatchOnceSatisfied     = gangspec.MatchOnceSatisfied
)

// DefaultScheduleTimeout applies when a PodGroup sets none.
const DefaultScheduleTimeout = 60 * time.Second

// annotation reads a Strata key or its Koordinator alias, and says which
// key it came from for error messages.
func annotation(ann map[string]string, key string) (value, from string, ok bool) {
	return gangspec.Annotation(ann, key)
}

// gangSpec is everything the plugin needs to know about one gang.
type gangSpec struct {
	key       string // namespace/name
	minMember int
	timeout   time.Duration
	rules     []topotree.Rule
	// group lists the keys of every gang admitted together, self included,
	// sorted, all of the gang's namespace (gangspec refuses others). The
	// plugin acts on a group only through confined, which keeps the gangs
	// that list this one back.
	group       []string
	matchPolicy string
	// nonStrict keeps waiting members waiting when another member cannot
	// be placed.
	nonStrict bool
	created   metav1.Time
	// podGroup is the PodGroup object, nil for a gang defined on pods or
	// by the upstream workload API.
	podGroup *schedulingv1alpha1.PodGroup
	// upstream is set for scheduling.k8s.io/v1beta1 PodGroups: the
	// scheduler schedules them as a group in one cycle and its own
	// GangScheduling plugin counts the quorum; Strata places them.
	upstream bool
	// victimKey says how the gang's pods are evicted when a higher-priority
	// gang preempts: as one unit with that key (community gangs; upstream
	// groups with disruptionMode All, keyed by the highest such group), or
	// one by one when empty (upstream disruptionMode Single).
	victimKey string
	// err makes every member unschedulable with a message that names the
	// bad field.
	err error
}

// gangKeyOf returns the gang a pod belongs to, or "". Pods join a gang
// through the community PodGroup label, the upstream workload API
// (spec.schedulingGroup.podGroupName) or Koordinator's name annotation.
func gangKeyOf(pod *corev1.Pod) string {
	if name := pod.Labels[schedulingv1alpha1.PodGroupLabel]; name != "" {
		return pod.Namespace + "/" + name
	}
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && *g.PodGroupName != "" {
		return pod.Namespace + "/" + *g.PodGroupName
	}
	if name, _, ok := annotation(pod.Annotations, KeyName); ok && name != "" {
		return pod.Namespace + "/" + name
	}
	return ""
}

// specFromPodGroup reads a gang from its PodGroup.
func specFromPodGroup(pg *schedulingv1alpha1.PodGroup) *gangSpec {
	g := &gangSpec{
		key:       pg.Namespace + "/" + pg.Name,
		minMember: int(pg.Spec.MinMember),
		timeout:   DefaultScheduleTimeout,
		created:   pg.CreationTimestamp,
		podGroup:  pg,
		victimKey: pg.Namespace + "/" + pg.Name,
	}
	if g.minMember < 1 {
		g.minMember = 1
	}
	if s := pg.Spec.ScheduleTimeoutSeconds; s != nil && *s > 0 {
		g.timeout = time.Duration(*s) * time.Second
	}
	g.fill(pg.Namespace, pg.Annotations)
	return g
}

// specFromPod reads a gang defined only by pod annotations.
func specFromPod(pod *corev1.Pod, key string) *gangSpec {
	g := &gangSpec{key: key, minMember: 1, timeout: DefaultScheduleTimeout, created: pod.CreationTimestamp, victimKey: key}
	n, err := gangspec.MinAvailable(pod.Annotations)
	if err != nil {
		g.fail(err)
	}
	g.minMember = n
	g.fill(pod.Namespace, pod.Annotations)
	return g
}

// fill reads the annotations shared by every kind of gang; the first
// error makes the gang's members unschedulable.
func (g *gangSpec) fill(namespace string, ann map[string]string) {
	s, errs := gangspec.Parse(ann, gangspec.Gang{Namespace: namespace, Key: g.key, MinMember: g.minMember})
	if len(errs) > 0 {
		g.fail(errs[0])
	}
	g.rules, g.group, g.matchPolicy, g.nonStrict = s.Rules, s.Group, s.MatchPolicy, s.NonStrict
	if s.Timeout > 0 {
		g.timeout = s.Timeout
	}
}

// fail records the first error in the gang's spec.
func (g *gangSpec) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// specFromUpstream reads a gang from an upstream PodGroup
// (scheduling.k8s.io/v1beta1): minCount from the gang policy, and the
// disruption mode of the group and of the CompositePodGroups above it
// (ancestors, innermost first), which decides how its pods are preempted.
// Its topology constraints are placed by GeneratePlacements.
func specFromUpstream(pg *schedulingv1beta1.PodGroup, ancestors []*schedulingv1alpha3.CompositePodGroup) *gangSpec {
	g := &gangSpec{
		key:         pg.Namespace + "/" + pg.Name,
		minMember:   1,
		timeout:     DefaultScheduleTimeout,
		created:     pg.CreationTimestamp,
		matchPolicy: MatchWaitingAndRunning,
		upstream:    true,
	}
	if gang := pg.Spec.SchedulingPolicy.Gang; gang != nil && gang.MinCount > 0 {
		g.minMember = int(gang.MinCount)
	}
	if m := pg.Spec.DisruptionMode; m != nil && m.All != nil {
		g.victimKey = g.key
	}
	for _, a := range ancestors { // innermost first: the last All wins
		if m := a.Spec.DisruptionMode; m != nil && m.All != nil {
			g.victimKey = a.Namespace + "/" + a.Name
		}
	}
	// Strata's annotations work on upstream PodGroups too.
	g.fill(pg.Namespace, pg.Annotations)
	return g
}

// confined returns g with its group cut to the gangs that consent to it:
// those that list g back in their own groups annotation.
//
// A gang acts on the other gangs of its group: one of its members that
// cannot be placed rejects their waiting members, the member that
// completes the group lets them go, writes their PodGroups Scheduled and
// drops their preemption reservations. A gang that names another in its
// annotation must not get that power over it alone. A listed gang that
// exists and does not list g back is therefore left out, and g fails with
// an error naming both (binding g without it would break the
// all-or-nothing g asked for). A listed gang with neither a PodGroup nor
// pods yet stays: there is nothing of it to act on, and g waits for it as
// for any missing member.
func (p *Plugin) confined(g *gangSpec) *gangSpec {
	if g == nil || g.upstream || len(g.group) < 2 {
		return g
	}
	c := *g
	c.group = make([]string, 0, len(g.group))
	for _, k := range g.group {
		if k == g.key || p.listsBack(k, g.key) {
			c.group = append(c.group, k)
			continue
		}
		c.fail(fmt.Errorf("gang %s lists %s in its %s annotation, but %s does not list %s back: "+
			"gangs are admitted together only when each lists the others", g.key, k, KeyGroups, k, g.key))
	}
	return &c
}

// listsBack reports whether gang k lists key in its group, or does not
// exist yet.
func (p *Plugin) listsBack(k, key string) bool {
	o := p.specByKey(k, nil)
	if slices.Contains(o.group, key) {
		return true
	}
	return o.podGroup == nil && !o.upstream && len(p.members(k)) == 0
}
