// Package e2e runs Strata end to end on the in-process control plane: the
// real kube-apiserver, kube-scheduler and ResourceClaim controller, and
// simulated nodes whose kubelet plugins run on fake hardware and are
// driven through the DRA gRPC API.
//
// Control-plane logs are discarded unless STRATA_E2E_LOG is set to a
// verbosity (0, 2, 5, ...).
package e2e

import (
	"os"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

func TestMain(m *testing.M) {
	if v, err := strconv.Atoi(os.Getenv("STRATA_E2E_LOG")); err == nil {
		klog.SetLoggerWithOptions(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(v))), klog.ContextualLogger(true))
	} else {
		klog.SetLoggerWithOptions(logr.Discard(), klog.ContextualLogger(true))
	}
	os.Exit(m.Run())
}
