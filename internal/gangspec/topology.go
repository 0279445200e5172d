package gangspec

import (
	"fmt"
	"strings"

	"github.com/strata-sh/strata/internal/decode"
	"github.com/strata-sh/strata/internal/topotree"
)

// topologySpec is the JSON of the network-topology-spec annotation.
type topologySpec struct {
	GatherStrategy []gatherRule `json:"gatherStrategy"`
}

type gatherRule struct {
	Layer            string            `json:"layer"`
	Strategy         topotree.Strategy `json:"strategy"`
	PodCountMultiple int               `json:"podCountMultiple,omitempty"`
}

// parseTopologySpec decodes network-topology-spec strictly (an unknown
// field is an error); errors name the field inside the JSON. The rules
// are nil when anything is wrong.
func parseTopologySpec(ann map[string]string) ([]topotree.Rule, []*Error) {
	raw, from, ok := Annotation(ann, KeyNetworkTopologySpec)
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var spec topologySpec
	if err := decode.Strict([]byte(raw), &spec); err != nil {
		return nil, []*Error{{Key: from, Detail: err.Error()}}
	}
	var rules []topotree.Rule
	var errs []*Error
	for i, r := range spec.GatherStrategy {
		field := fmt.Sprintf("gatherStrategy[%d]", i)
		if r.Layer == "" {
			errs = append(errs, errorf(from, "%s.layer: required", field))
		}
		if r.Strategy != topotree.MustGather && r.Strategy != topotree.PreferGather {
			errs = append(errs, errorf(from, "%s.strategy: %q is neither %s nor %s", field, r.Strategy, topotree.MustGather, topotree.PreferGather))
		}
		if r.PodCountMultiple < 0 {
			errs = append(errs, errorf(from, "%s.podCountMultiple: %d is negative", field, r.PodCountMultiple))
		}
		rules = append(rules, topotree.Rule{Layer: r.Layer, Strategy: r.Strategy, PodCountMultiple: r.PodCountMultiple})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return rules, nil
}
