package report

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// classFinding says what is wrong with a DeviceClass a claim asks for,
// "" when nothing is: the class does not exist, or no published device
// passes its selectors (no driver behind it, or selectors that exclude
// every device). The scheduler itself only says it "cannot allocate all
// claims".
func classFindings(ctx context.Context, classes []resourceapi.DeviceClass, slices []resourceapi.ResourceSlice) map[string]string {
	out := map[string]string{}
	compiler := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true})
	for _, class := range classes {
		var selectors []cel.CompilationResult
		ok := true
		for _, sel := range class.Spec.Selectors {
			if sel.CEL == nil {
				continue
			}
			r := compiler.CompileCELExpression(sel.CEL.Expression, cel.Options{})
			if r.Error != nil {
				out[class.Name] = fmt.Sprintf("DeviceClass %s has a selector that does not compile: %v", class.Name, r.Error)
				ok = false
				break
			}
			selectors = append(selectors, r)
		}
		if ok && !anyDeviceMatches(ctx, selectors, slices) {
			out[class.Name] = fmt.Sprintf("DeviceClass %s matches no published device (no driver publishes a device its selectors accept)", class.Name)
		}
	}
	return out
}

func anyDeviceMatches(ctx context.Context, selectors []cel.CompilationResult, slices []resourceapi.ResourceSlice) bool {
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			in := cel.Device{Driver: s.Spec.Driver, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity}
			all := true
			for _, sel := range selectors {
				if ok, _, err := sel.DeviceMatches(ctx, in); err != nil || !ok {
					all = false
					break
				}
			}
			if all {
				return true
			}
		}
	}
	return false
}

// claimFindings lists what is wrong with the classes a claim asks for
// (every alternative of a firstAvailable request must be wrong).
func claimFindings(c *resourceapi.ResourceClaim, known map[string]bool, findings map[string]string) []string {
	if c == nil || c.Status.Allocation != nil {
		return nil
	}
	finding := func(class string) string {
		if !known[class] {
			return fmt.Sprintf("DeviceClass %s does not exist", class)
		}
		return findings[class]
	}
	seen := map[string]bool{}
	var out []string
	add := func(f string) {
		if f != "" && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			add(finding(r.Exactly.DeviceClassName))
			continue
		}
		var alts []string
		for _, sub := range r.FirstAvailable {
			f := finding(sub.DeviceClassName)
			if f == "" {
				alts = nil
				break
			}
			alts = append(alts, f)
		}
		for _, f := range alts {
			add(f)
		}
	}
	sort.Strings(out)
	return out
}

// withFindings appends class findings to a pod's message.
func withFindings(msg string, findings []string) string {
	var unique []string
	seen := map[string]bool{}
	for _, f := range findings {
		if !seen[f] {
			seen[f] = true
			unique = append(unique, f)
		}
	}
	if len(unique) == 0 {
		return msg
	}
	return strings.TrimSuffix(msg, ".") + "; " + strings.Join(unique, "; ")
}
