// Package gangspec reads the gang annotations of PodGroups and pods:
// Strata's keys (scheduling.strata.sh/) and Koordinator's aliases
// (gang.scheduling.koordinator.sh/). It is the one parser that the gang
// scheduler plugin and strata-controller's admission webhook share, and it
// links nothing of kube-scheduler.
package gangspec

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	"github.com/strata-sh/strata/internal/topotree"
)

// Keys of the gang annotations, without their prefix.
const (
	// KeyNetworkTopologySpec holds the gang's gather rules as JSON:
	// {"gatherStrategy":[{"layer":"BlockLayer","strategy":"PreferGather","podCountMultiple":8}]}.
	KeyNetworkTopologySpec = "network-topology-spec"
	// KeyGroups lists the gangs admitted together, as a JSON array of
	// "name" or "namespace/name" (the gang itself included or not), all
	// in the gang's own namespace.
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

// Keys lists every gang annotation key, without prefix.
var Keys = []string{KeyNetworkTopologySpec, KeyGroups, KeyMatchPolicy, KeyName, KeyMinAvailable,
	KeyWaitingTime, KeyMode, KeyTotalNumber, KeyNetworkTopologyIndex}

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

// Annotation reads a Strata key or its Koordinator alias, Strata's first,
// and returns the full key it was read from.
func Annotation(ann map[string]string, key string) (value, from string, ok bool) {
	return schedulingv1alpha1.GangAnnotation(ann, key)
}

// HasAny says whether ann holds any gang annotation, under either prefix.
func HasAny(ann map[string]string) bool {
	for k := range ann {
		if strings.HasPrefix(k, schedulingv1alpha1.AnnotationPrefix) || strings.HasPrefix(k, schedulingv1alpha1.KoordinatorAnnotationPrefix) {
			key := k[strings.Index(k, "/")+1:]
			for _, g := range Keys {
				if key == g {
					return true
				}
			}
		}
	}
	return false
}

// Error is one bad gang annotation.
type Error struct {
	// Key is the full annotation key, prefix included.
	Key string
	// Detail says what is wrong, naming the field inside the value where
	// there is one ("gatherStrategy[0].strategy: ...").
	Detail string
}

// Error reads "annotation <key>: <detail>".
func (e *Error) Error() string { return "annotation " + e.Key + ": " + e.Detail }

func errorf(key, format string, args ...any) *Error {
	return &Error{Key: key, Detail: fmt.Sprintf(format, args...)}
}

// Gang is what the annotations are read for.
type Gang struct {
	// Namespace qualifies the names in the groups annotation.
	Namespace string
	// Key is the gang's "namespace/name".
	Key string
	// MinMember is the gang's minimum, which total-number may not be
	// below.
	MinMember int
}

// Spec is what a gang's annotations say.
type Spec struct {
	// Rules are the gather rules of network-topology-spec; nil when the
	// annotation is absent or wrong.
	Rules []topotree.Rule
	// Group lists the keys of every gang admitted together, the gang's
	// own included, sorted; all of the gang's namespace.
	Group []string
	// MatchPolicy is one of the Match constants (waiting-and-running by
	// default).
	MatchPolicy string
	// Timeout is the waiting-time; zero when not set or wrong.
	Timeout time.Duration
	// NonStrict keeps waiting members waiting when another member cannot
	// be placed.
	NonStrict bool
}

// Parse reads the annotations every kind of gang shares (not
// min-available, see MinAvailable). It returns every error, in this
// order: network-topology-spec, match-policy, waiting-time, mode,
// total-number, network-topology-index, groups. A wrong value leaves its
// default in the Spec.
func Parse(ann map[string]string, gang Gang) (Spec, []*Error) {
	var errs []*Error
	rules, ruleErrs := parseTopologySpec(ann)
	errs = append(errs, ruleErrs...)
	s := Spec{Rules: rules, MatchPolicy: MatchWaitingAndRunning}
	if v, from, ok := Annotation(ann, KeyMatchPolicy); ok {
		switch v {
		case MatchOnlyWaiting, MatchWaitingAndRunning, MatchOnceSatisfied:
			s.MatchPolicy = v
		default:
			errs = append(errs, errorf(from, "%q is not one of %s, %s, %s", v, MatchOnlyWaiting, MatchWaitingAndRunning, MatchOnceSatisfied))
		}
	}
	if v, from, ok := Annotation(ann, KeyWaitingTime); ok {
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			errs = append(errs, errorf(from, "%q is not a positive duration", v))
		} else {
			s.Timeout = d
		}
	}
	if v, from, ok := Annotation(ann, KeyMode); ok {
		switch v {
		case ModeStrict:
		case ModeNonStrict:
			s.NonStrict = true
		default:
			errs = append(errs, errorf(from, "%q is neither %s nor %s", v, ModeStrict, ModeNonStrict))
		}
	}
	if v, from, ok := Annotation(ann, KeyTotalNumber); ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			errs = append(errs, errorf(from, "%q is not a positive integer", v))
		} else if n < gang.MinMember {
			errs = append(errs, errorf(from, "%d is less than the gang's minimum of %d members", n, gang.MinMember))
		}
	}
	if _, from, ok := Annotation(ann, KeyNetworkTopologyIndex); ok {
		errs = append(errs, IndexError(from))
	}
	group, err := parseGroups(ann, gang)
	if err != nil {
		errs = append(errs, err)
	}
	s.Group = group
	return s, errs
}

// IndexError refuses Koordinator's network-topology-index, read from key.
func IndexError(key string) *Error {
	return errorf(key, "placing members in rank order is not supported; remove it (members are placed by the gang's network-topology-spec)")
}

// MinAvailable reads min-available, which sizes a gang declared on pods
// alone: 1 when absent, and never less than 1.
func MinAvailable(ann map[string]string) (int, *Error) {
	v, from, ok := Annotation(ann, KeyMinAvailable)
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return max(n, 1), errorf(from, "%q is not a positive integer", v)
	}
	return n, nil
}

// parseGroups reads the groups annotation: the gang's own key and the
// others', namespace-qualified, without duplicates, sorted.
//
// A group stays in its gang's namespace. The gangs of a group release,
// allow and report on each other, so an entry naming another namespace's
// gang would let one tenant reject the waiting members of another's gang
// and write its status: the first such entry is an error, and every such
// entry is left out of the group.
func parseGroups(ann map[string]string, gang Gang) ([]string, *Error) {
	group := []string{gang.Key}
	v, from, ok := Annotation(ann, KeyGroups)
	if !ok || strings.TrimSpace(v) == "" {
		return group, nil
	}
	var members []string
	if err := json.Unmarshal([]byte(v), &members); err != nil {
		return group, errorf(from, "want a JSON array of \"namespace/name\": %v", err)
	}
	var bad *Error
	seen := map[string]bool{gang.Key: true}
	for _, m := range members {
		if !strings.Contains(m, "/") {
			m = gang.Namespace + "/" + m
		}
		if ns, _, _ := strings.Cut(m, "/"); ns != gang.Namespace {
			if bad == nil {
				bad = errorf(from, "%q is a gang of namespace %q; a group lists only gangs of its own namespace, %q", m, ns, gang.Namespace)
			}
			continue
		}
		if !seen[m] {
			seen[m] = true
			group = append(group, m)
		}
	}
	sort.Strings(group)
	return group, bad
}
