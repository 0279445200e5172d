// Package schedulerplugins assembles the kube-scheduler plugins that Strata
// compiles into strata-scheduler. Each plugin lives in its own package next
// to this one; this package only lists them.
package schedulerplugins

import (
	"context"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
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
// Each plugin reads the process's feature gates when it is built, as the
// in-tree ones are handed them: a process that builds schedulers under
// different gates (upstream's benchmark harness, tests) gets the gates of
// each.
func Registry() runtime.Registry {
	return runtime.Registry{
		gang.Name:        withGates(gang.New),
		fitplus.Name:     withGates(fitplus.New),
		scarceavoid.Name: withGates(scarceavoid.New),
		fragscore.Name:   withGates(fragscore.New),
		devicefit.Name:   withGates(devicefit.New),
	}
}

// withGates adapts a plugin constructor that takes the scheduler's
// features, read from the feature gates at build time.
func withGates(f func(context.Context, k8sruntime.Object, fwk.Handle, feature.Features) (fwk.Plugin, error)) runtime.PluginFactory {
	return func(ctx context.Context, obj k8sruntime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return f(ctx, obj, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	}
}
