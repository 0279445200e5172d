// Command ascend-kubelet-plugin is the DRA kubelet plugin of driver
// ascend.strata.sh: Huawei Ascend NPUs, whole and as vNPUs. It runs as a
// privileged DaemonSet with the host's Ascend driver and npu-smi mounted.
package main

import (
	"context"

	"github.com/strata-sh/strata/drivers/ascend/app"
	"github.com/strata-sh/strata/drivers/plugin/pluginmain"
)

func main() {
	o := app.NewOptions()
	pluginmain.Main("Ascend kubelet plugin", o.AddFlags, func(ctx context.Context) error { return app.Run(ctx, o) })
}
