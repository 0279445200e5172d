// Command rdma-kubelet-plugin is the DRA kubelet plugin of driver
// rdma.strata.sh: RDMA NICs and their SR-IOV virtual functions. It runs
// as a DaemonSet on the nodes' host network with CAP_NET_ADMIN, which it
// needs to configure virtual functions through their physical function.
package main

import (
	"context"

	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
	"github.com/strata-sh/strata/drivers/rdma/app"
)

func main() {
	o := app.NewOptions()
	pluginmain.Main("RDMA kubelet plugin", o.AddFlags, func(ctx context.Context) error { return app.Run(ctx, o) })
}
