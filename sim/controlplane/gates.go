package controlplane

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
)

// ParseFeatureGates reads "Name=true,Other=false", the form of
// kube-apiserver's --feature-gates.
func ParseFeatureGates(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want Name=true or Name=false", part)
		}
		on, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%q: %q is not true or false", part, value)
		}
		out[strings.TrimSpace(name)] = on
	}
	return out, nil
}

// ValidateFeatureGates checks gates against the ones this control plane
// (Kubernetes 1.37) knows, as kube-apiserver would: unknown names and
// locked gates set against their value are errors.
func ValidateFeatureGates(gates map[string]bool) error {
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	var unknown []string
	for name := range gates {
		if _, ok := known[featuregate.Feature(name)]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("unknown feature gate %s (not a Kubernetes 1.37 gate)", strings.Join(unknown, ", "))
	}
	return utilfeature.DefaultMutableFeatureGate.DeepCopy().SetFromMap(gates)
}

var runtimeConfigEntry = regexp.MustCompile(`^(api/(all|ga|beta|alpha)|[a-z0-9.-]+/v[0-9]+((alpha|beta)[0-9]+)?|v1)(=(true|false))?$`)

// ValidateRuntimeConfig checks the form of --runtime-config entries
// ("scheduling.k8s.io/v1beta1=true", "api/alpha=true"); which group
// versions exist is the API server's to say when it starts.
func ValidateRuntimeConfig(entries []string) error {
	for _, e := range entries {
		if !runtimeConfigEntry.MatchString(e) {
			return fmt.Errorf("runtime config %q: want group/version[=true|false] or api/all|ga|beta|alpha[=true|false]", e)
		}
	}
	return nil
}

// gateAPIs are the API versions a gate is no use without; they are
// served whenever the gate is on, unless the runtime config says
// otherwise for that group version.
var gateAPIs = map[string][]string{
	"GenericWorkload":   {"scheduling.k8s.io/v1beta1"},
	"CompositePodGroup": {"scheduling.k8s.io/v1alpha3"},
}

// WithGateAPIs adds to runtimeConfig the API versions the enabled gates
// need and runtimeConfig does not mention.
func WithGateAPIs(gates map[string]bool, runtimeConfig []string) []string {
	out := append([]string(nil), runtimeConfig...)
	mentioned := map[string]bool{}
	for _, e := range runtimeConfig {
		gv, _, _ := strings.Cut(e, "=")
		mentioned[gv] = true
	}
	names := make([]string, 0, len(gateAPIs))
	for name := range gateAPIs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !gates[name] {
			continue
		}
		for _, gv := range gateAPIs[name] {
			if !mentioned[gv] {
				out = append(out, gv+"=true")
				mentioned[gv] = true
			}
		}
	}
	return out
}
