package v1alpha1

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// roundTrip checks a decoded config: it is valid, and encoding it and
// decoding it again gives the same config (the plugin core decodes what
// the API server stored; a DeviceClass written back by a tool must mean
// the same).
func roundTrip[T interface{ Validate() field.ErrorList }](t *testing.T, kind string, cfg T, decode func([]byte) (T, error)) {
	t.Helper()
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Errorf("%s decoded but is invalid: %v", kind, errs.ToAggregate())
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatalf("%s %+v does not encode: %v", kind, cfg, err)
	}
	again, err := decode(raw)
	if err != nil {
		t.Fatalf("%s %s does not decode again: %v", kind, raw, err)
	}
	if diff := cmp.Diff(cfg, again); diff != "" {
		t.Errorf("%s changed on encode and decode (-first +second):\n%s", kind, diff)
	}
}

// FuzzDecodeConfigs: every opaque config kind decoded from the same
// bytes. A config decodes as one kind at most (apiVersion and kind are
// checked), and one that decodes is valid and survives an encode and
// decode unchanged.
func FuzzDecodeConfigs(f *testing.F) {
	const gv = `{"apiVersion":"config.strata.sh/v1alpha1",`
	for _, s := range []string{
		gv + `"kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimit":50,"memoryLimit":"20Gi"}}}`,
		gv + `"kind":"GpuConfig","sharing":{"strategy":"MPS","computeShare":"Unlimited","mps":{"activeThreadPercentage":30,"pinnedMemoryLimit":"1.5Gi"}}}`,
		gv + `"kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`,
		"apiVersion: config.strata.sh/v1alpha1\nkind: GpuConfig\nsharing:\n  strategy: None\n",
		gv + `"kind":"NicConfig","vf":{"vlan":100,"vlanQoS":3,"trust":true,"spoofCheck":false,"mtu":9000,"maxTxRate":"25G"}}`,
		gv + `"kind":"NpuConfig","driver":"None"}`,
		gv + `"kind":"MluConfig","cnmon":"Mount"}`,
		gv + `"kind":"MluConfig","smlu":{}}`,
		`{"apiVersion":"config.strata.sh/v1beta1","kind":"NpuConfig"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		decoded := 0
		if cfg, err := DecodeGpuConfig(raw); err == nil {
			decoded++
			roundTrip(t, GpuConfigKind, cfg, DecodeGpuConfig)
		}
		if cfg, err := DecodeNicConfig(raw); err == nil {
			decoded++
			roundTrip(t, NicConfigKind, cfg, DecodeNicConfig)
		}
		if cfg, err := DecodeNpuConfig(raw); err == nil {
			decoded++
			roundTrip(t, NpuConfigKind, cfg, DecodeNpuConfig)
		}
		if cfg, err := DecodeMluConfig(raw); err == nil {
			decoded++
			roundTrip(t, MluConfigKind, cfg, DecodeMluConfig)
		}
		if decoded > 1 {
			t.Errorf("%q decodes as %d kinds", raw, decoded)
		}
	})
}
