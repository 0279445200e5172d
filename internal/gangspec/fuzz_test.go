package gangspec

import (
	"slices"
	"strings"
	"testing"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
)

// FuzzParse feeds arbitrary values to every gang annotation, under
// Strata's prefix or Koordinator's, and holds Parse to its contract: it
// never panics; every error names a gang annotation key; the group holds
// the gang itself, sorted, each gang once, all of the gang's namespace;
// the match policy is one of the three; a timeout is never negative; and
// what an annotation's error rejected keeps its default.
func FuzzParse(f *testing.F) {
	f.Add(`{"gatherStrategy":[{"layer":"BlockLayer","strategy":"MustGather"}]}`, `["team-a/b","team-a/c"]`, "once-satisfied", "30s", "NonStrict", "4", "1", false)
	f.Add(`[`, `["team-b/x"]`, "bogus", "-5s", "x", "-1", "y", true)
	f.Add(``, `["team-a/a","team-a/a","c"]`, "", "1h", "Strict", "", "", false)
	f.Add(`{}`, `["team-b\u002fx"]`, "only-waiting", "0", "", "0", "0", true)
	f.Fuzz(func(t *testing.T, topo, groups, match, waiting, mode, total, index string, koordinator bool) {
		prefix := schedulingv1alpha1.AnnotationPrefix
		if koordinator {
			prefix = schedulingv1alpha1.KoordinatorAnnotationPrefix
		}
		ann := map[string]string{}
		for k, v := range map[string]string{KeyNetworkTopologySpec: topo, KeyGroups: groups, KeyMatchPolicy: match, KeyWaitingTime: waiting,
			KeyMode: mode, KeyTotalNumber: total, KeyNetworkTopologyIndex: index} {
			if v != "" {
				ann[prefix+k] = v
			}
		}
		gang := Gang{Namespace: "team-a", Key: "team-a/a", MinMember: 2}
		s, errs := Parse(ann, gang)
		for _, e := range errs {
			if e == nil || !strings.HasPrefix(e.Key, prefix) || !slices.Contains(Keys, strings.TrimPrefix(e.Key, prefix)) || e.Detail == "" {
				t.Fatalf("error %+v does not name a gang annotation and what is wrong", e)
			}
		}
		if !slices.Contains(s.Group, gang.Key) || !slices.IsSorted(s.Group) || len(slices.Compact(slices.Clone(s.Group))) != len(s.Group) {
			t.Fatalf("group %q: want the gang itself, sorted, each once", s.Group)
		}
		for _, g := range s.Group {
			if !strings.HasPrefix(g, gang.Namespace+"/") || strings.Count(g, "/") != 1 {
				t.Fatalf("group %q holds %q, not a gang of namespace %s", s.Group, g, gang.Namespace)
			}
		}
		if !slices.Contains([]string{MatchOnlyWaiting, MatchWaitingAndRunning, MatchOnceSatisfied}, s.MatchPolicy) {
			t.Fatalf("match policy %q", s.MatchPolicy)
		}
		if s.Timeout < 0 {
			t.Fatalf("timeout %s", s.Timeout)
		}
		failed := map[string]bool{}
		for _, e := range errs {
			failed[strings.TrimPrefix(e.Key, prefix)] = true
		}
		if failed[KeyMatchPolicy] && s.MatchPolicy != MatchWaitingAndRunning {
			t.Fatalf("a refused match policy left %q, want the default", s.MatchPolicy)
		}
		if failed[KeyWaitingTime] && s.Timeout != 0 {
			t.Fatalf("a refused waiting time left %s", s.Timeout)
		}
		if failed[KeyNetworkTopologySpec] && s.Rules != nil {
			t.Fatalf("a refused topology spec left rules %+v", s.Rules)
		}
	})
}
