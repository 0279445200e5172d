// Package schedulerplugins assembles the kube-scheduler plugins that Strata
// compiles into strata-scheduler. Each plugin lives in its own package next
// to this one; this package only lists them.
package schedulerplugins

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/strata-sh/strata/scheduler-plugins/devicefit"
	"github.com/strata-sh/strata/scheduler-plugins/fitplus"
	"github.com/strata-sh/strata/scheduler-plugins/fragscore"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
	"github.com/strata-sh/strata/scheduler-plugins/scarceavoid"
)

// Registry returns the out-of-tree plugins of strata-scheduler by name.
// The in-tree plugins (including DynamicResources) are always present.
// As kube-scheduler's in-tree registry does, it reads the process's
// feature gates once and hands them to the plugins.
func Registry() runtime.Registry {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	return runtime.Registry{
		gang.Name:        runtime.FactoryAdapter[fwk.Plugin](fts, gang.New),
		fitplus.Name:     runtime.FactoryAdapter[fwk.Plugin](fts, fitplus.New),
		scarceavoid.Name: runtime.FactoryAdapter[fwk.Plugin](fts, scarceavoid.New),
		fragscore.Name:   runtime.FactoryAdapter[fwk.Plugin](fts, fragscore.New),
		devicefit.Name:   runtime.FactoryAdapter[fwk.Plugin](fts, devicefit.New),
	}
}
