package main

import (
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// setupLogging sends all logging, including the control plane's, to
// stderr at the given verbosity. Below zero nothing is logged: the report
// is the output, and the embedded API server reports harmless start-up
// races as errors that would only confuse.
func setupLogging(verbosity int) {
	if verbosity < 0 {
		klog.SetLoggerWithOptions(logr.Discard(), klog.ContextualLogger(true))
		return
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(verbosity)))
	klog.SetLoggerWithOptions(logger, klog.ContextualLogger(true))
}
