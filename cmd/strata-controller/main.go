// Command strata-controller keeps the status of Strata's cluster objects:
// ClusterNetworkTopology and PodGroup.
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/strata-sh/strata/controller"
)

func main() {
	o := controller.Options{}
	flag.BoolVar(&o.LeaderElection, "leader-elect", true, "run active/standby with leader election")
	flag.StringVar(&o.MetricsAddress, "metrics-address", ":8080", "metrics address; 0 disables")
	flag.StringVar(&o.HealthAddress, "health-address", ":8081", "health probe address; 0 disables")
	flag.Parse()
	ctx := ctrl.SetupSignalHandler()
	log := ctrl.Log.WithName("strata-controller")
	mgr, err := controller.NewManager(ctrl.GetConfigOrDie(), o)
	if err != nil {
		log.Error(err, "Cannot create the manager")
		os.Exit(1)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}
