// Package apply creates the objects of Kubernetes manifests, of any kind
// the API server serves, in an order that satisfies their dependencies
// (namespaces and CRDs before the objects that need them, pods last).
package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager owns the fields the simulator applies.
const FieldManager = "strata-sim"

// Object is one manifest document and where it came from.
type Object struct {
	*unstructured.Unstructured
	Source string
}

// ReadPaths reads manifests from files and directories (non-recursive,
// *.yaml, *.yml and *.json in name order). Documents may be separated by
// "---"; List kinds are flattened.
func ReadPaths(paths []string) ([]Object, error) {
	var objs []Object
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			got, err := Decode(raw, f)
			if err != nil {
				return nil, err
			}
			objs = append(objs, got...)
		}
	}
	return objs, nil
}

func expand(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
			out = append(out, filepath.Join(p, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Decode splits a YAML or JSON stream into objects.
func Decode(raw []byte, source string) ([]Object, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []Object
	for i := 0; ; i++ {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s: document %d: apiVersion and kind are required", source, i)
		}
		if u.GroupVersionKind() == simClusterKind {
			// A strata-sim cluster file sitting next to the manifests
			// describes nodes, not an API object.
			continue
		}
		if u.IsList() {
			err := u.EachListItem(func(o runtime.Object) error {
				objs = append(objs, Object{Unstructured: o.(*unstructured.Unstructured), Source: source})
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
			}
			continue
		}
		objs = append(objs, Object{Unstructured: u, Source: source})
	}
}

// simClusterKind is the kind of strata-sim cluster files.
var simClusterKind = schema.GroupVersionKind{Group: "sim.strata.sh", Version: "v1alpha1", Kind: "Cluster"}

// kindOrder ranks kinds that others depend on; everything else comes
// before pods, which come last so that their claims, classes and groups
// exist when the scheduler first sees them.
var kindOrder = map[string]int{
	"Namespace":                0,
	"CustomResourceDefinition": 1,
	"PriorityClass":            2,
	"DeviceClass":              3,
	"ClusterNetworkTopology":   4,
	"ResourceClaimTemplate":    5,
	"ResourceClaim":            5,
	"PodGroup":                 6,
	"PodDisruptionBudget":      6,
	"Pod":                      9,
}

func rank(kind string) int {
	if r, ok := kindOrder[kind]; ok {
		return r
	}
	return 7
}

// Applier creates objects through the dynamic client.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	// uncontrolled are the applied objects no controller of the
	// simulated cluster acts on.
	uncontrolled []Object
}

// Controlled reports whether something in the simulated cluster acts on
// objects of an API group: Kubernetes' own groups (kube-controller-
// manager's controllers, the scheduler, the API server) and Strata's.
// Other groups are other operators' custom resources (kubeflow.org
// MPIJobs, jobset.x-k8s.io JobSets, batch.volcano.sh Jobs): they are
// stored and nothing creates their pods.
func Controlled(group string) bool {
	return group == "" || !strings.Contains(group, ".") || strings.HasSuffix(group, ".k8s.io") || strings.HasSuffix(group, ".strata.sh")
}

// Uncontrolled returns the objects applied so far that no controller of
// the simulated cluster acts on.
func (a *Applier) Uncontrolled() []Object {
	return a.uncontrolled
}

// New returns an Applier for the API server of config.
func New(config *restclient.Config) (*Applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Apply creates or updates the objects in dependency order. Objects with a
// name are server-side applied, objects with only generateName are
// created. It waits for CRDs to be established before using their kinds.
func (a *Applier) Apply(ctx context.Context, objs []Object) error {
	sorted := append([]Object(nil), objs...)
	sort.SliceStable(sorted, func(i, j int) bool { return rank(sorted[i].GetKind()) < rank(sorted[j].GetKind()) })
	for _, o := range sorted {
		if err := a.applyOne(ctx, o); err != nil {
			return err
		}
		if !Controlled(o.GroupVersionKind().Group) {
			a.uncontrolled = append(a.uncontrolled, o)
		}
		if o.GetKind() == "CustomResourceDefinition" {
			if err := a.waitEstablished(ctx, o.GetName()); err != nil {
				return err
			}
			a.mapper.Reset()
		}
		if o.GetKind() == "PriorityClass" {
			if err := a.waitPriorityClass(ctx, o.GetName()); err != nil {
				return fmt.Errorf("%s: PriorityClass %s: %w", o.Source, o.GetName(), err)
			}
		}
	}
	return nil
}

func (a *Applier) applyOne(ctx context.Context, o Object) error {
	gvk := o.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w", o.Source, gvk.Kind, o.GetName(), err)
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			o.SetNamespace(metav1.NamespaceDefault)
		}
		ri = a.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
	}
	if o.GetName() == "" {
		if _, err := ri.Create(ctx, o.Unstructured, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("%s: create %s %s: %w", o.Source, gvk.Kind, o.GetGenerateName(), err)
		}
		return nil
	}
	body, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	force := true
	if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
		return fmt.Errorf("%s: apply %s %s: %w", o.Source, gvk.Kind, qualified(o), err)
	}
	return nil
}

func (a *Applier) waitEstablished(ctx context.Context, name string) error {
	gvr := schema.GroupVersionResource{Group: apiextensionsv1.GroupName, Version: "v1", Resource: "customresourcedefinitions"}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := a.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// waitPriorityClass returns once pod admission knows the PriorityClass.
// The Priority admission plugin reads classes from an informer, so a pod
// created right after its class may be refused; a dry-run pod shows when
// the class is usable.
func (a *Applier) waitPriorityClass(ctx context.Context, name string) error {
	pods := a.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace(metav1.NamespaceDefault)
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"generateName": "priority-probe-"},
		"spec": map[string]any{
			"priorityClassName": name,
			"containers":        []any{map[string]any{"name": "probe", "image": "probe"}},
		},
	}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = pods.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return !isUnknownPriorityClass(last), nil
	})
	if err != nil {
		return fmt.Errorf("not admitted for pods after 30s: %w", last)
	}
	return nil
}

func isUnknownPriorityClass(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name")
}

func qualified(o Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return strings.Join([]string{o.GetNamespace(), o.GetName()}, "/")
}
