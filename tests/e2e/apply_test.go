package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/strata-sh/strata/sim/apply"
)

// A file whose third and fourth documents the API server refuses: a
// quantity that does not parse and a misspelt field.
const refusedDocs = `
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: team-a}
data: {k: v}
---
apiVersion: v1
kind: Pod
metadata: {name: bad-quantity, namespace: team-a}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: lots}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: misspelt, namespace: team-a}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10, imagePullPolicyy: Always}]
`

// A CRD and an object of its kind that its schema refuses: the object
// cannot be dry-run before its CRD exists.
const refusedCustomObject = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: before-widget}
data: {k: v}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {size: big}
`

// What the dry run must take as given by the same apply: a namespace and
// a PriorityClass that pods use.
const selfContained = `
apiVersion: v1
kind: Pod
metadata: {name: urgent, namespace: team-b}
spec:
  priorityClassName: team-b-urgent
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: team-b-urgent}
value: 1000
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
`

// TestApplyIsAllOrNothing: a bad document is named with its file,
// document and field, and the apply that holds it leaves nothing behind,
// whether the dry run caught it or the API server refused it only once
// its CRD existed. An apply that provides its own namespace and
// PriorityClass passes the dry run.
func TestApplyIsAllOrNothing(t *testing.T) {
	e := startCluster(t, oneH100Node)
	dir := t.TempDir()
	write := func(name, body string) []apply.Object {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		objs, err := apply.ReadPaths([]string{path})
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	wantErr := func(err error, parts ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("apply succeeded; want an error saying %q", parts)
		}
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error does not say %q:\n%v", p, err)
			}
		}
	}

	err := e.sim.Apply(e.ctx, write("a.yaml", refusedDocs))
	wantErr(err, "nothing applied", "refuses 2 of 4",
		"a.yaml: document 3: Pod team-a/bad-quantity", "field spec.containers[0].resources.requests.cpu",
		"a.yaml: document 4: Pod team-a/misspelt", "imagePullPolicyy")
	if _, err := e.client.CoreV1().Namespaces().Get(e.ctx, "team-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace team-a of the refused apply: %v, want NotFound", err)
	}

	err = e.sim.Apply(e.ctx, write("b.yaml", refusedCustomObject))
	wantErr(err, "b.yaml: document 3: Widget default/w", "spec.size")
	dyn, err := dynamic.NewForConfig(e.sim.ControlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	e.eventually(30*time.Second, "the refused apply's CRD and ConfigMap are deleted", func(ctx context.Context) (bool, error) {
		_, crdErr := crds.Get(ctx, "widgets.example.com", metav1.GetOptions{})
		_, cmErr := e.client.CoreV1().ConfigMaps("default").Get(ctx, "before-widget", metav1.GetOptions{})
		return apierrors.IsNotFound(crdErr) && apierrors.IsNotFound(cmErr), nil
	})

	if err := e.sim.Apply(e.ctx, write("c.yaml", selfContained)); err != nil {
		t.Fatalf("apply with its own namespace and PriorityClass: %v", err)
	}
	pod, err := e.client.CoreV1().Pods("team-b").Get(e.ctx, "urgent", metav1.GetOptions{})
	if err != nil || pod.Spec.Priority == nil || *pod.Spec.Priority != 1000 {
		t.Errorf("pod team-b/urgent: %v (priority %v), want it created with priority 1000", err, pod.Spec.Priority)
	}
}
