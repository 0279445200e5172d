package plugin

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// ConfigHandler turns one driver's opaque configs into the configuration
// of each device. The plugin core decodes every config of a claim once,
// before anything is recorded or touched, and hands each device the
// result of Effective; backends never see raw JSON.
type ConfigHandler interface {
	// Decode decodes one opaque config strictly (an unknown kind or field
	// is an error that names it) and checks it on its own.
	Decode(raw []byte) (any, error)
	// Effective merges the decoded configs that apply to one device,
	// lowest precedence first (DeviceClass configs, then the claim's, each
	// in listed order), fills in defaults and checks the result. With no
	// configs it returns the defaults.
	Effective(configs []any) (any, error)
}

// Configurable is implemented by backends that take opaque configs. A
// claim with a config for a backend that is not Configurable is refused.
type Configurable interface {
	ConfigHandler() ConfigHandler
}

// deviceConfigs decodes the driver's configs of an allocation once each
// and returns, per result, the effective configuration.
type deviceConfigs struct {
	handler ConfigHandler
	driver  string
	configs []resourceapi.DeviceAllocationConfiguration
	decoded map[int]any
}

func newDeviceConfigs(backend Backend, driver string, configs []resourceapi.DeviceAllocationConfiguration) (*deviceConfigs, error) {
	dc := &deviceConfigs{driver: driver, configs: configs, decoded: map[int]any{}}
	if c, ok := backend.(Configurable); ok {
		dc.handler = c.ConfigHandler()
	}
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != driver {
			continue
		}
		where := fmt.Sprintf("claim config %d", i)
		if c.Source == resourceapi.AllocationConfigSourceClass {
			where = fmt.Sprintf("DeviceClass config %d", i)
		}
		if dc.handler == nil {
			return nil, fmt.Errorf("%s: driver %s takes no opaque configuration", where, driver)
		}
		v, err := dc.handler.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s for %s: %w", where, driver, err)
		}
		dc.decoded[i] = v
	}
	return dc, nil
}

// forRequest returns the effective configuration of a device allocated
// for request ("name" or "name/subrequest"): the configs that name it
// or its parent request, or name no request, class configs first.
func (dc *deviceConfigs) forRequest(request string) (any, error) {
	if dc.handler == nil {
		return nil, nil
	}
	var class, claim []any
	for i, c := range dc.configs {
		v, ok := dc.decoded[i]
		if !ok {
			continue
		}
		if len(c.Requests) > 0 && !slices.ContainsFunc(c.Requests, func(r string) bool { return requestMatches(r, request) }) {
			continue
		}
		if c.Source == resourceapi.AllocationConfigSourceClass {
			class = append(class, v)
		} else {
			claim = append(claim, v)
		}
	}
	cfg, err := dc.handler.Effective(append(class, claim...))
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", request, err)
	}
	return cfg, nil
}
