// Command nvidia-kubelet-plugin is the DRA kubelet plugin of driver
// nvidia.strata.sh. It runs as a DaemonSet on GPU nodes; given its pod's
// UID (--pod-uid, $POD_UID) the DaemonSet can be updated with maxSurge,
// the new pod serving beside the old one until that one stops.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/nvidia/app"
)

func main() {
	o := app.NewOptions()
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(fs)
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, o); err != nil {
		klog.FromContext(ctx).Error(err, "NVIDIA kubelet plugin failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}
