// Package schedulerplugins assembles the kube-scheduler plugins that Strata
// compiles into strata-scheduler. Each plugin lives in its own package next
// to this one; this package only lists them.
package schedulerplugins

import (
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/strata-sh/strata/scheduler-plugins/gang"
)

// Registry returns the out-of-tree plugins of strata-scheduler by name.
// The in-tree plugins (including DynamicResources) are always present.
func Registry() runtime.Registry {
	return runtime.Registry{
		gang.Name: gang.New,
	}
}
