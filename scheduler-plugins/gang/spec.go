package gang

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/decode"
	"github.com/strata-sh/strata/scheduler-plugins/topology"
)

// Annotations of PodGroups (and, for gangs without a PodGroup, of pods).
// Each Strata key has a Koordinator alias, so manifests written for
// Koordinator work unchanged apart from schedulerName.
const (
	AnnotationPrefix = schedulingv1alpha1.AnnotationPrefix
	KoordPrefix      = schedulingv1alpha1.KoordinatorAnnotationPrefix

	// KeyNetworkTopologySpec holds the gang's gather rules as JSON:
	// {"gatherStrategy":[{"layer":"BlockLayer","strategy":"PreferGather","podCountMultiple":8}]}.
	KeyNetworkTopologySpec = "network-topology-spec"
	// KeyGroups lists the gangs admitted together, as a JSON array of
	// "namespace/name" (the gang itself included or not).
	KeyGroups = "groups"
	// KeyMatchPolicy says which members count toward minMember for members
	// that arrive late: only-waiting, waiting-and-running (default) or
	// once-satisfied.
	KeyMatchPolicy = "match-policy"
	// KeyName and KeyMinAvailable define a gang on pods alone (no
	// PodGroup object), as Koordinator allows.
	KeyName         = "name"
	KeyMinAvailable = "min-available"
	// KeyWaitingTime overrides scheduleTimeoutSeconds ("30s", "5m").
	KeyWaitingTime = "waiting-time"
	// KeyMode is Koordinator's gang mode: Strict (default) releases every
	// waiting member when one member cannot be placed; NonStrict keeps
	// them waiting until their timeout.
	KeyMode = "mode"
	// KeyTotalNumber is the number of members the job will create
	// (Koordinator); it must be at least minMember.
	KeyTotalNumber = "total-number"
	// KeyNetworkTopologyIndex is Koordinator's rank of a member along
	// the network topology; Strata refuses it rather than ignore it.
	KeyNetworkTopologyIndex = "network-topology-index"
)

// Gang modes.
const (
	ModeStrict    = "Strict"
	ModeNonStrict = "NonStrict"
)

// Match policies.
const (
	MatchOnlyWaiting       = "only-waiting"
	MatchWaitingAndRunning = "waiting-and-running"
	MatchOnceSatisfied     = "once-satisfied"
)

// DefaultScheduleTimeout applies when a PodGroup sets none.
const DefaultScheduleTimeout = 60 * time.Second

// annotation reads a Strata key or its Koordinator alias, and says which
// key it came from for error messages.
func annotation(ann map[string]string, key string) (value, from string, ok bool) {
	return schedulingv1alpha1.GangAnnotation(ann, key)
}

// topologySpec is the JSON of the network-topology-spec annotation.
type topologySpec struct {
	GatherStrategy []gatherRule `json:"gatherStrategy"`
}

type gatherRule struct {
	Layer            string            `json:"layer"`
	Strategy         topology.Strategy `json:"strategy"`
	PodCountMultiple int               `json:"podCountMultiple,omitempty"`
}

// parseTopologySpec decodes the annotation strictly; errors name the
// annotation and the field.
func parseTopologySpec(ann map[string]string) ([]topology.Rule, error) {
	raw, from, ok := annotation(ann, KeyNetworkTopologySpec)
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var spec topologySpec
	if err := decode.Strict([]byte(raw), &spec); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", from, err)
	}
	var rules []topology.Rule
	for i, r := range spec.GatherStrategy {
		field := fmt.Sprintf("annotation %s: gatherStrategy[%d]", from, i)
		if r.Layer == "" {
			return nil, fmt.Errorf("%s.layer: required", field)
		}
		if r.Strategy != topology.MustGather && r.Strategy != topology.PreferGather {
			return nil, fmt.Errorf("%s.strategy: %q is neither %s nor %s", field, r.Strategy, topology.MustGather, topology.PreferGather)
		}
		if r.PodCountMultiple < 0 {
			return nil, fmt.Errorf("%s.podCountMultiple: %d is negative", field, r.PodCountMultiple)
		}
		rules = append(rules, topology.Rule{Layer: r.Layer, Strategy: r.Strategy, PodCountMultiple: r.PodCountMultiple})
	}
	return rules, nil
}

// gangSpec is everything the plugin needs to know about one gang.
type gangSpec struct {
	key       string // namespace/name
	minMember int
	timeout   time.Duration
	rules     []topology.Rule
	// group lists the keys of every gang admitted together, self included,
	// sorted.
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
	if v, from, ok := annotation(pod.Annotations, KeyMinAvailable); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			g.err = fmt.Errorf("annotation %s: %q is not a positive integer", from, v)
		}
		g.minMember = max(n, 1)
	}
	g.fill(pod.Namespace, pod.Annotations)
	return g
}

// fill reads the annotations shared by both kinds of gang.
func (g *gangSpec) fill(namespace string, ann map[string]string) {
	rules, err := parseTopologySpec(ann)
	if err != nil && g.err == nil {
		g.err = err
	}
	g.rules = rules
	g.matchPolicy = MatchWaitingAndRunning
	if v, from, ok := annotation(ann, KeyMatchPolicy); ok {
		switch v {
		case MatchOnlyWaiting, MatchWaitingAndRunning, MatchOnceSatisfied:
			g.matchPolicy = v
		default:
			if g.err == nil {
				g.err = fmt.Errorf("annotation %s: %q is not one of %s, %s, %s", from, v, MatchOnlyWaiting, MatchWaitingAndRunning, MatchOnceSatisfied)
			}
		}
	}
	if v, from, ok := annotation(ann, KeyWaitingTime); ok {
		d, err := time.ParseDuration(v)
		if (err != nil || d <= 0) && g.err == nil {
			g.err = fmt.Errorf("annotation %s: %q is not a positive duration", from, v)
		} else if err == nil {
			g.timeout = d
		}
	}
	if v, from, ok := annotation(ann, KeyMode); ok {
		switch v {
		case ModeStrict:
		case ModeNonStrict:
			g.nonStrict = true
		default:
			g.fail(fmt.Errorf("annotation %s: %q is neither %s nor %s", from, v, ModeStrict, ModeNonStrict))
		}
	}
	if v, from, ok := annotation(ann, KeyTotalNumber); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			g.fail(fmt.Errorf("annotation %s: %q is not a positive integer", from, v))
		} else if n < g.minMember {
			g.fail(fmt.Errorf("annotation %s: %d is less than the gang's minimum of %d members", from, n, g.minMember))
		}
	}
	if _, from, ok := annotation(ann, KeyNetworkTopologyIndex); ok {
		g.fail(fmt.Errorf("annotation %s: placing members in rank order is not supported; remove it (members are placed by the gang's network-topology-spec)", from))
	}
	g.group = []string{g.key}
	if v, from, ok := annotation(ann, KeyGroups); ok && strings.TrimSpace(v) != "" {
		var members []string
		if err := json.Unmarshal([]byte(v), &members); err != nil {
			if g.err == nil {
				g.err = fmt.Errorf("annotation %s: want a JSON array of \"namespace/name\": %v", from, err)
			}
			return
		}
		seen := map[string]bool{g.key: true}
		for _, m := range members {
			if !strings.Contains(m, "/") {
				m = namespace + "/" + m
			}
			if !seen[m] {
				seen[m] = true
				g.group = append(g.group, m)
			}
		}
	}
	sortStrings(g.group)
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
