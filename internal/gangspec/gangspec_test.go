package gangspec

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-sh/strata/internal/topotree"
)

func TestParseReadsEveryKey(t *testing.T) {
	s, errs := Parse(map[string]string{
		"gang.scheduling.koordinator.sh/network-topology-spec": `{"gatherStrategy":[{"layer":"BlockLayer","strategy":"MustGather","podCountMultiple":4}]}`,
		"scheduling.strata.sh/groups":                          `["ps", "ml/train", "ml/eval"]`,
		"scheduling.strata.sh/match-policy":                    MatchOnlyWaiting,
		"scheduling.strata.sh/waiting-time":                    "5m",
		"gang.scheduling.koordinator.sh/mode":                  ModeNonStrict,
		"gang.scheduling.koordinator.sh/total-number":          "8",
	}, Gang{Namespace: "ml", Key: "ml/train", MinMember: 8})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := Spec{
		Rules:       []topotree.Rule{{Layer: "BlockLayer", Strategy: topotree.MustGather, PodCountMultiple: 4}},
		Group:       []string{"ml/eval", "ml/ps", "ml/train"},
		MatchPolicy: MatchOnlyWaiting,
		Timeout:     5 * time.Minute,
		NonStrict:   true,
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

// Every bad annotation is reported, in a fixed order, each with its key;
// the defaults stay.
func TestParseReportsEveryError(t *testing.T) {
	s, errs := Parse(map[string]string{
		"scheduling.strata.sh/network-topology-spec":            `{"gatherStrategy":[{"strategy":"MustGather","podCountMultiple":-1}]}`,
		"scheduling.strata.sh/match-policy":                     "all",
		"scheduling.strata.sh/waiting-time":                     "-1s",
		"gang.scheduling.koordinator.sh/mode":                   "Lenient",
		"gang.scheduling.koordinator.sh/total-number":           "0",
		"gang.scheduling.koordinator.sh/network-topology-index": "3",
		"scheduling.strata.sh/groups":                           "ps",
	}, Gang{Namespace: "ml", Key: "ml/train", MinMember: 2})
	want := []string{
		`annotation scheduling.strata.sh/network-topology-spec: gatherStrategy[0].layer: required`,
		`annotation scheduling.strata.sh/network-topology-spec: gatherStrategy[0].podCountMultiple: -1 is negative`,
		`annotation scheduling.strata.sh/match-policy: "all" is not one of only-waiting, waiting-and-running, once-satisfied`,
		`annotation scheduling.strata.sh/waiting-time: "-1s" is not a positive duration`,
		`annotation gang.scheduling.koordinator.sh/mode: "Lenient" is neither Strict nor NonStrict`,
		`annotation gang.scheduling.koordinator.sh/total-number: "0" is not a positive integer`,
		`annotation gang.scheduling.koordinator.sh/network-topology-index: placing members in rank order is not supported; remove it (members are placed by the gang's network-topology-spec)`,
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	if len(got) != len(want)+1 {
		t.Fatalf("errors %q, want %d", got, len(want)+1)
	}
	if diff := cmp.Diff(want, got[:len(want)]); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	if s.Rules != nil || s.MatchPolicy != MatchWaitingAndRunning || s.Timeout != 0 || len(s.Group) != 1 {
		t.Errorf("spec %+v, want the defaults", s)
	}
}

// A group stays in its gang's namespace: an entry naming another
// namespace's gang is refused with the entry named, and left out of the
// group, so that no reader of the Spec ever acts on that gang.
func TestGroupsRefuseOtherNamespaces(t *testing.T) {
	tests := map[string]struct {
		groups    string
		want      string
		wantGroup []string
	}{
		"other namespace": {`["ps", "team-b/train"]`,
			`annotation gang.scheduling.koordinator.sh/groups: "team-b/train" is a gang of namespace "team-b"; a group lists only gangs of its own namespace, "ml"`,
			[]string{"ml/ps", "ml/train"}},
		"first of several named": {`["team-b/x", "team-c/y", "ml/ps"]`,
			`annotation gang.scheduling.koordinator.sh/groups: "team-b/x" is a gang of namespace "team-b"; a group lists only gangs of its own namespace, "ml"`,
			[]string{"ml/ps", "ml/train"}},
		"empty namespace": {`["/ps"]`,
			`annotation gang.scheduling.koordinator.sh/groups: "/ps" is a gang of namespace ""; a group lists only gangs of its own namespace, "ml"`,
			[]string{"ml/train"}},
		"own namespace": {`["ml/ps", "eval"]`, "", []string{"ml/eval", "ml/ps", "ml/train"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, errs := Parse(map[string]string{"gang.scheduling.koordinator.sh/groups": tc.groups},
				Gang{Namespace: "ml", Key: "ml/train", MinMember: 1})
			var got string
			if len(errs) > 0 {
				got = errs[0].Error()
			}
			if len(errs) > 1 || got != tc.want {
				t.Errorf("errors %q, want %q", errs, tc.want)
			}
			if diff := cmp.Diff(tc.wantGroup, s.Group); diff != "" {
				t.Errorf("group (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMinAvailable(t *testing.T) {
	for v, want := range map[string]int{"": 1, "3": 3, "0": 1, "x": 1} {
		ann := map[string]string{}
		if v != "" {
			ann["gang.scheduling.koordinator.sh/min-available"] = v
		}
		n, err := MinAvailable(ann)
		if n != want || (err != nil) != (v == "0" || v == "x") {
			t.Errorf("min-available %q: %d, %v; want %d", v, n, err, want)
		}
	}
}

func TestHasAny(t *testing.T) {
	tests := []struct {
		ann  map[string]string
		want bool
	}{
		{map[string]string{"scheduling.strata.sh/name": "x"}, true},
		{map[string]string{"gang.scheduling.koordinator.sh/total-number": "1"}, true},
		{map[string]string{"scheduling.strata.sh/from-pod-annotations": "x"}, false},
		{map[string]string{"example.com/name": "x"}, false},
		{nil, false},
	}
	for _, tc := range tests {
		if got := HasAny(tc.ann); got != tc.want {
			t.Errorf("HasAny(%v) = %v, want %v", tc.ann, got, tc.want)
		}
	}
}
