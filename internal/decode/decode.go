// Package decode reads user-written YAML or JSON strictly: unknown and
// duplicate fields are errors that name the field's full path
// ("nodeGroups[0].gpus"), so a typo is reported instead of ignored.
package decode

import (
	"errors"
	"fmt"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Strict decodes YAML or JSON into obj and fails on unknown or duplicate
// fields.
func Strict(data []byte, obj any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	strictErrs, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("%w", errors.Join(strictErrs...))
	}
	return nil
}
