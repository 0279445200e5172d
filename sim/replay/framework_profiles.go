package replay

import (
	"embed"
	"fmt"
	"reflect"
	"slices"

	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
)

// Framework engine profiles: the scheduling profiles it replays, each a
// KubeSchedulerConfiguration under profiles/.
const (
	// ProfileDefault is kube-scheduler's default plugins.
	ProfileDefault = "default"
	// ProfileMostAllocated is the defaults with NodeResourcesFit scoring
	// MostAllocated on CPU and memory.
	ProfileMostAllocated = "mostallocated"
	// ProfileStrata is Strata's shipped profile with the
	// StrataFragmentation score plugin.
	ProfileStrata = "strata"
)

// FrameworkProfiles lists the framework engine's profiles.
var FrameworkProfiles = []string{ProfileDefault, ProfileMostAllocated, ProfileStrata}

//go:embed profiles/*.yaml
var profileFiles embed.FS

// LoadProfile reads a profile's configuration as kube-scheduler reads
// its --config file: decoded strictly, defaulted (the default plugins
// and their args filled in) and validated. It fails if the profile names
// a plugin strata-scheduler does not have.
func LoadProfile(name string) (*config.KubeSchedulerProfile, error) {
	if !slices.Contains(FrameworkProfiles, name) {
		return nil, fmt.Errorf("profile %q is not one of %v", name, FrameworkProfiles)
	}
	raw, err := profileFiles.ReadFile("profiles/" + name + ".yaml")
	if err != nil {
		return nil, err
	}
	obj, _, err := scheme.Codecs.UniversalDecoder().Decode(raw, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	cfg, ok := obj.(*config.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("profile %s: a %T, not a KubeSchedulerConfiguration", name, obj)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	if len(cfg.Profiles) != 1 {
		return nil, fmt.Errorf("profile %s: %d profiles in its configuration, want 1", name, len(cfg.Profiles))
	}
	prof := cfg.Profiles[0]
	if prof.PercentageOfNodesToScore == nil {
		prof.PercentageOfNodesToScore = cfg.PercentageOfNodesToScore
	}
	registry, err := Registry()
	if err != nil {
		return nil, err
	}
	for _, p := range profilePlugins(prof.Plugins) {
		if _, ok := registry[p]; !ok {
			return nil, fmt.Errorf("profile %s: plugin %s is not registered in strata-scheduler (scheduler-plugins/registry.go) nor in kube-scheduler", name, p)
		}
	}
	return &prof, nil
}

// profileWith loads a profile and sets its percentageOfNodesToScore if
// percentage is given.
func profileWith(name string, percentage *int32) (*config.KubeSchedulerProfile, error) {
	prof, err := LoadProfile(name)
	if err != nil || percentage == nil {
		return prof, err
	}
	if p := *percentage; p < 0 || p > 100 {
		return nil, fmt.Errorf("percentageOfNodesToScore %d is not between 0 (adaptive) and 100", p)
	}
	prof.PercentageOfNodesToScore = percentage
	return prof, nil
}

// Registry is strata-scheduler's: kube-scheduler's in-tree plugins and
// Strata's.
func Registry() (frameworkruntime.Registry, error) {
	r := frameworkplugins.NewInTreeRegistry()
	if err := r.Merge(schedulerplugins.Registry()); err != nil {
		return nil, fmt.Errorf("strata-scheduler's registry: %w", err)
	}
	return r, nil
}

// profilePlugins lists the plugins a profile enables at any extension
// point.
func profilePlugins(p *config.Plugins) []string {
	if p == nil {
		return nil
	}
	var out []string
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		set, ok := v.Field(i).Interface().(config.PluginSet)
		if !ok {
			continue
		}
		for _, e := range set.Enabled {
			if !slices.Contains(out, e.Name) {
				out = append(out, e.Name)
			}
		}
	}
	return out
}
