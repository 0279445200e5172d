package accelerator

import (
	"strings"
	"testing"
)

func TestTaintValueIsALabelValue(t *testing.T) {
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"Alarm", "80E01801"}, "Alarm-80E01801"},
		{[]string{"Critical"}, "Critical"},
		{[]string{"Bad state!", "x/y"}, "Bad-state--x-y"},
		{[]string{"", "?"}, "Unhealthy"},
		{[]string{strings.Repeat("A", 70)}, strings.Repeat("A", 63)},
	} {
		if got := TaintValue(c.words); got != c.want {
			t.Errorf("TaintValue(%q) = %q, want %q", c.words, got, c.want)
		}
	}
}
