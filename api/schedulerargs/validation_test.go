package schedulerargs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestValidateNodeResourcesFitPlusArgs(t *testing.T) {
	type res = map[corev1.ResourceName]ResourcesType
	tests := map[string]struct {
		resources res
		want      []string
	}{
		"koordinator example": {resources: res{
			"nvidia.com/gpu": {Type: MostAllocated, Weight: 2},
			"cpu":            {Type: LeastAllocated, Weight: 1},
			"memory":         {Type: LeastAllocated, Weight: 1},
		}},
		"a DeviceClass name": {resources: res{"nvidia-gpu.strata.sh": {Type: MostAllocated, Weight: 100}}},
		"empty":              {want: []string{"resources: Required value"}},
		"misspelt type": {
			resources: res{"nvidia.com/gpu": {Type: "MostAlocated", Weight: 1}},
			want:      []string{`resources[nvidia.com/gpu].type: Unsupported value: "MostAlocated": supported values: "LeastAllocated", "MostAllocated"`},
		},
		"no type": {
			resources: res{"cpu": {Weight: 1}},
			want:      []string{`resources[cpu].type: Required value: one of ["LeastAllocated" "MostAllocated"]`},
		},
		"weight too big": {
			resources: res{"cpu": {Type: LeastAllocated, Weight: 101}},
			want:      []string{"resources[cpu].weight: Invalid value: 101: must be between 1 and 100"},
		},
		"negative weight": {
			resources: res{"cpu": {Type: LeastAllocated, Weight: -1}},
			want:      []string{"resources[cpu].weight: Invalid value: -1: must be between 1 and 100"},
		},
		"bad name and bad type, sorted by name": {
			resources: res{
				"nvidia.com/gpu": {Type: "Packed", Weight: 1},
				"bad name":       {Type: LeastAllocated, Weight: 1},
			},
			want: []string{
				`resources[bad name]: Invalid value: "bad name": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				`resources[nvidia.com/gpu].type: Unsupported value: "Packed": supported values: "LeastAllocated", "MostAllocated"`,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := &NodeResourcesFitPlusArgs{Resources: tc.resources}
			if diff := cmp.Diff(tc.want, messages(args.Validate())); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultNodeResourcesFitPlusArgs(t *testing.T) {
	args := &NodeResourcesFitPlusArgs{Resources: map[corev1.ResourceName]ResourcesType{
		"cpu":            {Type: LeastAllocated},
		"nvidia.com/gpu": {Type: MostAllocated, Weight: 3},
	}}
	args.Default()
	want := map[corev1.ResourceName]ResourcesType{
		"cpu":            {Type: LeastAllocated, Weight: 1},
		"nvidia.com/gpu": {Type: MostAllocated, Weight: 3},
	}
	if diff := cmp.Diff(want, args.Resources); diff != "" {
		t.Errorf("defaulted resources (-want +got):\n%s", diff)
	}
}

func TestValidateScarceResourceAvoidanceArgs(t *testing.T) {
	tests := map[string]struct {
		resources []corev1.ResourceName
		want      []string
	}{
		"koordinator example": {resources: []corev1.ResourceName{"nvidia.com/gpu"}},
		"several":             {resources: []corev1.ResourceName{"nvidia.com/gpu", "nvidia-gpu.strata.sh", "rdma/hca"}},
		"empty":               {want: []string{"resources: Required value"}},
		"duplicate": {
			resources: []corev1.ResourceName{"nvidia.com/gpu", "cpu", "nvidia.com/gpu"},
			want:      []string{`resources[2]: Duplicate value: "nvidia.com/gpu"`},
		},
		"invalid name": {
			resources: []corev1.ResourceName{"nvidia.com/"},
			want:      []string{`resources[0]: Invalid value: "nvidia.com/": name part must be non-empty; name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := &ScarceResourceAvoidanceArgs{Resources: tc.resources}
			if diff := cmp.Diff(tc.want, messages(args.Validate())); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func messages[E interface{ Error() string }](errs []E) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}
