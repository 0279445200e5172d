package v1alpha1

import (
	"strings"
	"testing"
)

func TestDecodeGpuConfig(t *testing.T) {
	tests := map[string]struct {
		raw  string
		want string // substring of the error; "" for success
	}{
		"hami": {raw: `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimit":50,"memoryLimit":"20Gi"}}}`},
		"yaml": {raw: "apiVersion: config.strata.sh/v1alpha1\nkind: GpuConfig\nsharing:\n  strategy: MPS\n"},
		"unknown field": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimitt":50}}}`,
			want: `unknown field "sharing.hamiCore.coreLimitt"`,
		},
		"core out of range": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimit":150}}}`,
			want: "sharing.hamiCore.coreLimit: Invalid value: 150: must be between 1 and 100",
		},
		"mps block with other strategy": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","mps":{}}}`,
			want: "sharing.mps: Forbidden: only with strategy MPS",
		},
		"bad strategy": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"vGPU"}}`,
			want: `sharing.strategy: Unsupported value: "vGPU"`,
		},
		"negative memory": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mps":{"pinnedMemoryLimit":"-1Gi"}}}`,
			want: "sharing.mps.pinnedMemoryLimit",
		},
		"time slice": {raw: `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`},
		"bad time slice": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Forever"}}}`,
			want: `sharing.timeSlicing.interval: Unsupported value: "Forever"`,
		},
		"time slice with MPS": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","timeSlicing":{"interval":"Long"}}}`,
			want: "sharing.timeSlicing: Forbidden: only with strategy TimeSlicing",
		},
		"bad compute share": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","computeShare":"Half"}}`,
			want: `sharing.computeShare: Unsupported value: "Half"`,
		},
		"wrong kind": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig"}`,
			want: `kind "NpuConfig"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeGpuConfig([]byte(tc.raw))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestDecodeMluConfig(t *testing.T) {
	tests := map[string]struct {
		raw  string
		want string // substring of the error; "" for success
	}{
		"empty": {raw: `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig"}`},
		"mount": {raw: `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Mount"}`},
		"none":  {raw: `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"None"}`},
		"yaml":  {raw: "apiVersion: config.strata.sh/v1alpha1\nkind: MluConfig\ncnmon: None\n"},
		"unknown field": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","smlu":{}}`,
			want: `decode MluConfig: unknown field "smlu"`,
		},
		"bad cnmon": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Sometimes"}`,
			want: `cnmon: Unsupported value: "Sometimes": supported values: "Mount", "None"`,
		},
		"cnmon in lower case": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"mount"}`,
			want: `cnmon: Unsupported value: "mount"`,
		},
		"wrong kind": {
			raw:  `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","cnmon":"Mount"}`,
			want: `kind "NpuConfig", want config.strata.sh/v1alpha1 and MluConfig`,
		},
		"wrong apiVersion": {
			raw:  `{"apiVersion":"config.strata.sh/v1beta1","kind":"MluConfig"}`,
			want: `apiVersion "config.strata.sh/v1beta1"`,
		},
		"no kind": {
			raw:  `{"cnmon":"Mount"}`,
			want: `want config.strata.sh/v1alpha1 and MluConfig`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := DecodeMluConfig([]byte(tc.raw))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			case tc.want == "" && cfg == nil:
				t.Fatal("no config and no error")
			}
		})
	}
}
