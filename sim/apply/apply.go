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
	// Doc is the object's document in Source, counted from 1; Item is its
	// position in a List document, counted from 1 (0 outside lists).
	Doc, Item int
}

// Where names the object for a user: file, document and, for a List
// item, its position, then kind and name.
func (o Object) Where() string {
	doc := fmt.Sprintf("%s: document %d", o.Source, o.Doc)
	if o.Item > 0 {
		doc += fmt.Sprintf(" (item %d)", o.Item)
	}
	name := qualified(o)
	if name == "" {
		name = o.GetGenerateName() + "*"
	}
	return fmt.Sprintf("%s: %s %s", doc, o.GetKind(), name)
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
	for i := 1; ; i++ {
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
			item := 0
			err := u.EachListItem(func(o runtime.Object) error {
				item++
				objs = append(objs, Object{Unstructured: o.(*unstructured.Unstructured), Source: source, Doc: i, Item: item})
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
			}
			continue
		}
		objs = append(objs, Object{Unstructured: u, Source: source, Doc: i})
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
//
// Nothing is created until every object has passed a server-side dry
// run (validation, defaulting, admission, strict field checks), so a bad
// document is named with its file, document and field and leaves nothing
// behind. Objects whose kind a CRD of the same apply defines cannot be
// dry-run before that CRD exists; if the API server refuses one of them
// when it is created, the objects this call created are deleted again.
func (a *Applier) Apply(ctx context.Context, objs []Object) error {
	sorted := append([]Object(nil), objs...)
	sort.SliceStable(sorted, func(i, j int) bool { return rank(sorted[i].GetKind()) < rank(sorted[j].GetKind()) })
	for i := range sorted {
		// Each object is changed below (default namespace); the caller's
		// stay as they were.
		sorted[i].Unstructured = sorted[i].DeepCopy()
	}
	if err := a.dryRun(ctx, sorted); err != nil {
		return err
	}
	var created []created
	for _, o := range sorted {
		c, err := a.applyOne(ctx, o, false)
		if c != nil {
			created = append(created, *c)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", o.Where(), err)
		} else {
			err = a.afterApply(ctx, o)
		}
		if err != nil {
			if rerr := a.rollback(ctx, created); rerr != nil {
				return errors.Join(err, rerr)
			}
			return err
		}
		if !Controlled(o.GroupVersionKind().Group) {
			a.uncontrolled = append(a.uncontrolled, o)
		}
	}
	return nil
}

// afterApply waits until what an object declares can be used by the
// objects after it.
func (a *Applier) afterApply(ctx context.Context, o Object) error {
	switch o.GetKind() {
	case "CustomResourceDefinition":
		if err := a.waitEstablished(ctx, o.GetName()); err != nil {
			return fmt.Errorf("%s: not established: %w", o.Where(), err)
		}
		a.mapper.Reset()
	case "PriorityClass":
		if err := a.waitPriorityClass(ctx, o.GetName()); err != nil {
			return fmt.Errorf("%s: %w", o.Where(), err)
		}
	}
	return nil
}

// DryRun checks objects as Apply would before creating anything, and
// creates nothing.
func (a *Applier) DryRun(ctx context.Context, objs []Object) error {
	return a.dryRun(ctx, objs)
}

// dryRun checks every object with a server-side dry run and returns all
// refusals at once. What the apply itself provides is taken as present: a
// namespaced object whose namespace the apply creates is checked in the
// default namespace, a pod whose PriorityClass the apply creates is
// checked without it, and an object whose kind a CRD of the apply defines
// is left to its creation.
func (a *Applier) dryRun(ctx context.Context, objs []Object) error {
	namespaces, classes, kinds := map[string]bool{}, map[string]bool{}, map[schema.GroupKind]bool{}
	for _, o := range objs {
		switch o.GroupVersionKind().GroupKind() {
		case schema.GroupKind{Kind: "Namespace"}:
			namespaces[o.GetName()] = true
		case schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:
			classes[o.GetName()] = true
		case schema.GroupKind{Group: apiextensionsv1.GroupName, Kind: "CustomResourceDefinition"}:
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			kinds[schema.GroupKind{Group: group, Kind: kind}] = true
		}
	}
	var errs []error
	exists := map[string]bool{} // the step's namespaces that are there already
	for _, o := range objs {
		gk := o.GroupVersionKind().GroupKind()
		if kinds[gk] {
			if _, err := a.mapping(o); err != nil {
				continue // the CRD is not installed yet
			}
		}
		probe := Object{Unstructured: o.DeepCopy(), Source: o.Source, Doc: o.Doc, Item: o.Item}
		if ns := probe.GetNamespace(); namespaces[ns] {
			if _, known := exists[ns]; !known {
				exists[ns] = a.namespaceExists(ctx, ns)
			}
			if !exists[ns] {
				probe.SetNamespace(metav1.NamespaceDefault)
			}
		}
		if gk == (schema.GroupKind{Kind: "Pod"}) {
			if name, _, _ := unstructured.NestedString(probe.Object, "spec", "priorityClassName"); classes[name] {
				unstructured.RemoveNestedField(probe.Object, "spec", "priorityClassName")
				unstructured.RemoveNestedField(probe.Object, "spec", "priority")
			}
		}
		if _, err := a.applyOne(ctx, probe, true); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.Where(), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("nothing applied; the API server refuses %d of %d objects:\n%w", len(errs), len(objs), errors.Join(errs...))
	}
	return nil
}

func (a *Applier) namespaceExists(ctx context.Context, name string) bool {
	_, err := a.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, name, metav1.GetOptions{})
	return err == nil
}

// created is an object that an Apply call created (rather than changed).
type created struct {
	ri   dynamic.ResourceInterface
	name string
	what string
}

// rollback deletes the objects an Apply call created, latest first (pods
// before their claims, templates and namespaces).
func (a *Applier) rollback(ctx context.Context, objs []created) error {
	var errs []error
	background := metav1.DeletePropagationBackground
	for i := len(objs) - 1; i >= 0; i-- {
		err := objs[i].ri.Delete(ctx, objs[i].name, metav1.DeleteOptions{PropagationPolicy: &background})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("undo %s: %w", objs[i].what, err))
		}
	}
	return errors.Join(errs...)
}

func (a *Applier) mapping(o Object) (*meta.RESTMapping, error) {
	gvk := o.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	return mapping, err
}

// applyOne applies one object (dryRun: only checks it). It returns the
// object's handle if the call created it. Unknown and duplicate fields
// are errors, not warnings: a misspelt field would otherwise be dropped
// without a word.
func (a *Applier) applyOne(ctx context.Context, o Object, dryRun bool) (*created, error) {
	mapping, err := a.mapping(o)
	if err != nil {
		return nil, err
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() == "" {
			o.SetNamespace(metav1.NamespaceDefault)
		}
		ri = a.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
	}
	var dry []string
	if dryRun {
		dry = []string{metav1.DryRunAll}
	}
	if o.GetName() == "" {
		got, err := ri.Create(ctx, o.Unstructured, metav1.CreateOptions{FieldManager: FieldManager, DryRun: dry, FieldValidation: metav1.FieldValidationStrict})
		if err != nil {
			return nil, explain(o, err)
		}
		if dryRun {
			return nil, nil
		}
		return &created{ri: ri, name: got.GetName(), what: o.Where()}, nil
	}
	existed := true
	if !dryRun {
		_, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		existed = !apierrors.IsNotFound(err)
	}
	body, err := o.MarshalJSON()
	if err != nil {
		return nil, err
	}
	force := true
	if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force, DryRun: dry, FieldValidation: metav1.FieldValidationStrict}); err != nil {
		return nil, explain(o, err)
	}
	if existed {
		return nil, nil
	}
	return &created{ri: ri, name: o.GetName(), what: o.Where()}, nil
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
