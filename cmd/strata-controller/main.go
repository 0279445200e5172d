// Command strata-controller keeps the status of Strata's cluster objects,
// ClusterNetworkTopology and PodGroup, and serves the validating webhook
// that refuses bad Strata input when it is applied.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/strata-sh/strata/controller"
)

func main() {
	klog.InitFlags(nil) // --v and the other logging flags
	o := controller.NewOptions()
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := controller.Run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), o); err != nil {
		klog.Background().Error(err, "strata-controller stopped")
		os.Exit(1)
	}
}
