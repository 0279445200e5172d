package apply

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// explain adds the field to an API server error that does not name it.
// A value the API server cannot convert to its Go type (a quantity such
// as "16GB", a string where a number goes) is refused with the value's
// error only; the field is found here by converting the object with one
// field left out at a time.
func explain(o Object, err error) error {
	msg := err.Error()
	if !strings.Contains(msg, "unable to convert unstructured object") && !strings.Contains(msg, "failed to convert") {
		return err
	}
	if field := badField(o); field != "" {
		return fmt.Errorf("field %s: %w", field, err)
	}
	return err
}

// badField returns the path of the first field without which an object
// of a built-in kind converts to its Go type, or "" if there is none.
func badField(o Object) string {
	gvk := o.GroupVersionKind()
	if !scheme.Scheme.Recognizes(gvk) {
		return ""
	}
	converts := func(obj map[string]any) bool {
		typed, err := scheme.Scheme.New(gvk)
		return err == nil && runtime.DefaultUnstructuredConverter.FromUnstructured(obj, typed) == nil
	}
	if converts(o.Object) {
		return ""
	}
	var found string
	var walk func(path string, parent map[string]any) bool
	walk = func(path string, m map[string]any) bool {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := m[k]
			child := k
			if path != "" {
				child = path + "." + k
			}
			delete(m, k)
			fixed := converts(o.Object)
			m[k] = v
			if !fixed {
				continue
			}
			// Without k the object converts: the bad value is k or
			// somewhere below it.
			found = child
			switch v := v.(type) {
			case map[string]any:
				walk(child, v)
			case []any:
				for i, item := range v {
					if im, ok := item.(map[string]any); ok && walk(fmt.Sprintf("%s[%d]", child, i), im) {
						break
					}
				}
			}
			return true
		}
		return false
	}
	obj := o.DeepCopy()
	o = Object{Unstructured: obj}
	walk("", obj.Object)
	return found
}
