package cluster

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

var placeholderRE = regexp.MustCompile(`\{[^}]*\}`)
var indexDivRE = regexp.MustCompile(`^\{index(?:/([0-9]+))?\}$`)

// expandLabel replaces "{index}" and "{index/N}" in a label value and
// checks that the result is a valid label value.
func expandLabel(v string, index int) (string, error) {
	var err error
	out := placeholderRE.ReplaceAllStringFunc(v, func(ph string) string {
		m := indexDivRE.FindStringSubmatch(ph)
		if m == nil {
			err = errBadPlaceholder
			return ph
		}
		div := 1
		if m[1] != "" {
			div, _ = strconv.Atoi(m[1])
			if div < 1 {
				err = errBadPlaceholder
				return ph
			}
		}
		return strconv.Itoa(index / div)
	})
	if err != nil {
		return "", err
	}
	if msgs := validation.IsValidLabelValue(out); len(msgs) > 0 {
		return "", fmt.Errorf("label value %q: %s", out, msgs[0])
	}
	return out, nil
}

func sortStrings(s []string) []string {
	sort.Strings(s)
	return s
}
