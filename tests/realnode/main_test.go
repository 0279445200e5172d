// Package realnode runs Strata on real nodes: a real kubelet and
// containerd joined to the in-process control plane (package
// sim/realnode), Strata's kubelet plugins as the chart deploys them, from
// their images, on fake hardware below the vendor interface, and pods
// whose containers report what they see. Every assertion reads a
// container's own output through the API server.
//
// The suite needs root, overlayfs and the programs hack/realnode/install.sh
// installs ($STRATA_REALNODE_TOOLS, set by make); without them it skips
// and says why. STRATA_E2E_LOG sets the control plane's log verbosity.
package realnode

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/strata-sh/strata/sim/realnode"
)

func TestMain(m *testing.M) {
	if v, err := strconv.Atoi(os.Getenv("STRATA_E2E_LOG")); err == nil {
		klog.SetLoggerWithOptions(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(v))), klog.ContextualLogger(true))
	} else {
		klog.SetLoggerWithOptions(logr.Discard(), klog.ContextualLogger(true))
	}
	if err := realnode.CanRun(); err != nil {
		fmt.Println("SKIP real-node suite: this machine cannot run containers:", err)
		os.Exit(0)
	}
	code := m.Run()
	stopCluster()
	os.Exit(code)
}
