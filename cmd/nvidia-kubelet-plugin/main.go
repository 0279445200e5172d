// Command nvidia-kubelet-plugin is the DRA kubelet plugin of driver
// nvidia.strata.sh. It runs as a DaemonSet on GPU nodes; given its pod's
// UID (--pod-uid, $POD_UID) the DaemonSet can be updated with maxSurge,
// the new pod serving beside the old one until that one stops.
package main

import (
	"context"
	"os"

	"github.com/strata-sh/strata/drivers/nvidia/app"
	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
)

func main() {
	if len(os.Args) > 1 {
		if code, ok := app.Command(os.Args[1], os.Args[2:]); ok {
			os.Exit(code)
		}
	}
	o := app.NewOptions()
	pluginmain.Main("NVIDIA kubelet plugin", o.AddFlags, func(ctx context.Context) error { return app.Run(ctx, o) })
}
