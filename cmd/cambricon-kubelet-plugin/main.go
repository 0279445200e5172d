// Command cambricon-kubelet-plugin is the DRA kubelet plugin of driver
// cambricon.strata.sh: Cambricon MLU cards, whole and as dynamic sMLUs. It
// runs as a privileged DaemonSet with the host's cnmon mounted.
package main

import (
	"context"

	"github.com/strata-sh/strata/drivers/cambricon/app"
	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
)

func main() {
	o := app.NewOptions()
	pluginmain.Main("Cambricon kubelet plugin", o.AddFlags, func(ctx context.Context) error { return app.Run(ctx, o) })
}
