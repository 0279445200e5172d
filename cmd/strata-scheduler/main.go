// Command strata-scheduler is kube-scheduler 1.37 with Strata's plugins
// compiled in. It takes kube-scheduler's flags; the configuration Strata
// ships is deployments/helm/strata/files/scheduler-config.yaml.
package main

import (
	"os"
	"sort"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
)

func main() {
	registry := schedulerplugins.Registry()
	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	sort.Strings(names)
	opts := make([]app.Option, 0, len(names))
	for _, name := range names {
		opts = append(opts, app.WithPlugin(name, registry[name]))
	}
	os.Exit(cli.Run(app.NewSchedulerCommand(opts...)))
}
