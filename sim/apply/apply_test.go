package apply

import (
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeSkipsClusterFilesAndFlattensLists(t *testing.T) {
	body := `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups: []
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: b}
---
---
apiVersion: v1
kind: Pod
metadata: {name: p}
`
	objs, err := Decode([]byte(body), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Where())
	}
	// Documents are counted as the YAML reader splits them: empty ones
	// are not counted.
	want := []string{"x.yaml: document 2 (item 1): ConfigMap a", "x.yaml: document 2 (item 2): ConfigMap b", "x.yaml: document 3: Pod p"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
}

func TestDecodeCountsALeadingSeparator(t *testing.T) {
	objs, err := Decode([]byte("---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team}\n---\napiVersion: v1\nkind: Pod\nmetadata: {generateName: q-}\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Where())
	}
	if diff := cmp.Diff([]string{"x.yaml: document 1: Pod team/p", "x.yaml: document 2: Pod q-*"}, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
}

func TestDecodeRequiresKind(t *testing.T) {
	_, err := Decode([]byte("metadata: {name: x}\n"), "bad.yaml")
	if err == nil || !strings.Contains(err.Error(), "bad.yaml: document 1: apiVersion and kind are required") {
		t.Errorf("error = %v", err)
	}
}

func TestApplyOrder(t *testing.T) {
	kinds := []string{"Pod", "ResourceClaimTemplate", "PodGroup", "Deployment", "DeviceClass", "Namespace", "CustomResourceDefinition", "PriorityClass"}
	sort.SliceStable(kinds, func(i, j int) bool { return rank(kinds[i]) < rank(kinds[j]) })
	want := []string{"Namespace", "CustomResourceDefinition", "PriorityClass", "DeviceClass", "ResourceClaimTemplate", "PodGroup", "Deployment", "Pod"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestBadFieldNamesTheValueThatDoesNotConvert(t *testing.T) {
	for body, want := range map[string]string{
		`{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: a, image: i}, {name: b, image: i, resources: {limits: {memory: 16GB}}}]}}`: "spec.containers[1].resources.limits.memory",
		`{apiVersion: apps/v1, kind: Deployment, metadata: {name: d}, spec: {replicas: "two"}}`:                                                                 "spec.replicas",
		`{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: a, image: i}]}}`:                                                           "",
		`{apiVersion: example.com/v1, kind: Widget, metadata: {name: w}, spec: {size: big}}`:                                                                    "",
	} {
		objs, err := Decode([]byte(body), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if got := badField(objs[0]); got != want {
			t.Errorf("%s: bad field %q, want %q", body, got, want)
		}
	}
}
