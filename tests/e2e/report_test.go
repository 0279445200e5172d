package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-sh/strata/sim"
	"github.com/strata-sh/strata/sim/report"
)

const reportCases = `
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: short
spec:
  minMember: 3
---
apiVersion: v1
kind: Pod
metadata:
  name: short-0
  labels: {pod-group.scheduling.sigs.k8s.io: short}
spec:
  schedulerName: strata-scheduler
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
---
apiVersion: v1
kind: Pod
metadata:
  name: short-1
  labels: {pod-group.scheduling.sigs.k8s.io: short}
spec:
  schedulerName: strata-scheduler
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
---
apiVersion: v1
kind: Pod
metadata:
  name: no-template
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: does-not-exist}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: gpu}]}}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: fpga.example.com
spec:
  selectors:
  - cel:
      expression: device.driver == "fpga.example.com"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-fpga
spec:
  spec:
    devices:
      requests:
      - name: fpga
        exactly: {deviceClassName: fpga.example.com}
---
apiVersion: v1
kind: Pod
metadata:
  name: wants-fpga
spec:
  resourceClaims: [{name: fpga, resourceClaimTemplateName: one-fpga}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: fpga}]}}]
`

// A later step whose document the API server refuses.
const badStep = `
apiVersion: v1
kind: Pod
metadata:
  name: bad
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "lots"}}}]
`

// TestReportsSayWhy: every pod that does not run says why in the report,
// with the most specific reason there is: a gang short of members (held
// before scheduling, where kube-scheduler says nothing), a claim template
// that does not exist (the ResourceClaim controller's event), a
// DeviceClass no driver publishes devices for. A --then step that fails
// still prints the report of what ran before it, and names its step.
func TestReportsSayWhy(t *testing.T) {
	dir := t.TempDir()
	first, then := filepath.Join(dir, "cases.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(first, []byte(reportCases), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(then, []byte(badStep), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := sim.Run(context.Background(), sim.RunOptions{ClusterFile: examplesDir + "/workloads/cluster.yaml", Manifests: []string{first}, Then: []string{then},
		Once: true, Format: sim.FormatJSON, Timeout: time.Minute, Quiet: time.Second, Out: &out})
	if err == nil || !strings.Contains(err.Error(), "step 1 (--then "+then+")") || !strings.Contains(err.Error(), "bad") {
		t.Errorf("run with a bad --then step: %v, want an error naming the step and the pod", err)
	}
	var r report.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("no report of the steps that ran: %v\n%s", err, out.String())
	}
	want := map[string][2]string{
		"short-0":     {"WaitingForMembers", "gang default/short has 2 of 3 pods; waiting for 1 more member"},
		"no-template": {"FailedResourceClaimCreation", "does-not-exist"},
		"wants-fpga":  {"Unschedulable", "DeviceClass fpga.example.com matches no published device"},
	}
	for _, p := range r.Pods {
		w, ok := want[p.Name]
		if !ok {
			continue
		}
		delete(want, p.Name)
		if p.Reason != w[0] || !strings.Contains(p.Message, w[1]) {
			t.Errorf("%s: reason %q, message %q; want %q and a message saying %q", p.Name, p.Reason, p.Message, w[0], w[1])
		}
	}
	for name := range want {
		t.Errorf("pod %s missing from the report", name)
	}
}
