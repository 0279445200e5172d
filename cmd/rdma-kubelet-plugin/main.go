// Command rdma-kubelet-plugin is the DRA kubelet plugin of driver
// rdma.strata.sh: RDMA NICs and their SR-IOV virtual functions. It runs
// as a DaemonSet on the nodes' host network with CAP_NET_ADMIN, which it
// needs to configure virtual functions through their physical function.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/drivers/rdma/app"
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
		klog.FromContext(ctx).Error(err, "RDMA kubelet plugin failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}
