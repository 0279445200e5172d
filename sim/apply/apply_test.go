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
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if diff := cmp.Diff([]string{"ConfigMap/a", "ConfigMap/b", "Pod/p"}, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
}

func TestDecodeRequiresKind(t *testing.T) {
	_, err := Decode([]byte("metadata: {name: x}\n"), "bad.yaml")
	if err == nil || !strings.Contains(err.Error(), "bad.yaml: document 0: apiVersion and kind are required") {
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
