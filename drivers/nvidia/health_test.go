package nvidia

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/hardware"
)

func TestXIDClassificationAndHoldDown(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	b, srv, _ := newBackend(t, hardware.DGXH100())
	b.health.holdDown = 50 * time.Millisecond
	dev := srv.Devices[2]

	if b.handleEvent(logger, nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 13}) {
		t.Errorf("application XID 13 changed GPU health")
	}
	if len(b.health.taints()) != 0 {
		t.Fatalf("taints after an application XID: %v", b.health.taints())
	}
	if !b.handleEvent(logger, nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 48}) {
		t.Errorf("XID 48 did not change GPU health")
	}
	taints := b.health.taints()["gpu-2"]
	if len(taints) != 1 || taints[0].Key != TaintXID || taints[0].Value != "48" {
		t.Fatalf("taints = %+v, want xid=48", taints)
	}
	if b.probe(logger) {
		t.Errorf("probe within the hold-down cleared the XID")
	}
	time.Sleep(60 * time.Millisecond)
	if !b.probe(logger) || len(b.health.taints()) != 0 {
		t.Errorf("XID taint not cleared after the hold-down: %v", b.health.taints())
	}
}
