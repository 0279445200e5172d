// Package report describes the state of a simulated cluster for people
// (a table) and for scripts (JSON). The JSON schema is documented in
// docs/strata-sim.md and is a public interface: fields are only added.
package report

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/strata-sh/strata/scheduler-plugins/gang"
	"github.com/strata-sh/strata/sim/node"
)

// APIVersion and Kind of a JSON report.
const (
	APIVersion = "sim.strata.sh/v1alpha1"
	Kind       = "Report"
)

// Report is the state of the cluster after the manifests were applied.
type Report struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Cluster    string  `json:"cluster,omitempty"`
	Summary    Summary `json:"summary"`
	Nodes      []Node  `json:"nodes"`
	Pods       []Pod   `json:"pods"`
	Claims     []Claim `json:"claims"`
	Gangs      []Gang  `json:"gangs,omitempty"`
	// Uncontrolled lists applied objects of kinds no controller in the
	// simulated cluster acts on (other operators' custom resources, such
	// as MPIJob or JobSet): they exist, and nothing creates their pods.
	Uncontrolled []Object `json:"uncontrolled,omitempty"`
}

// Object is an applied object, named with the file it came from.
type Object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	Source     string `json:"source,omitempty"`
	Message    string `json:"message"`
}

// Summary counts what the rest of the report lists.
type Summary struct {
	Nodes            int `json:"nodes"`
	Pods             int `json:"pods"`
	Running          int `json:"running"`
	Pending          int `json:"pending"`
	Succeeded        int `json:"succeeded"`
	Failed           int `json:"failed"`
	Claims           int `json:"claims"`
	AllocatedClaims  int `json:"allocatedClaims"`
	PublishedDevices int `json:"publishedDevices"`
	AllocatedDevices int `json:"allocatedDevices"`
}

// Node is one node with its device counts.
type Node struct {
	Name             string            `json:"name"`
	Labels           map[string]string `json:"labels,omitempty"`
	PublishedDevices int               `json:"publishedDevices"`
	AllocatedDevices int               `json:"allocatedDevices"`
}

// Pod is one pod: where it runs, or why it does not.
type Pod struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	SchedulerName string `json:"schedulerName"`
	Node          string `json:"node,omitempty"`
	Phase         string `json:"phase"`
	// Reason and Message explain a pod that is not running: the
	// scheduler's Unschedulable condition, or the last warning event
	// (a failed prepare on the node, for example).
	Reason  string     `json:"reason,omitempty"`
	Message string     `json:"message,omitempty"`
	Claims  []PodClaim `json:"claims,omitempty"`
	// Containers is what the container runtime injected from CDI specs,
	// by container name.
	Containers map[string]node.Container `json:"containers,omitempty"`
}

// ExtendedResourcesClaim names the report entry of the claim the scheduler
// creates for a pod's extended resources (nvidia.com/gpu: 2, for example).
const ExtendedResourcesClaim = "(extended resources)"

// PodClaim is one entry of pod.spec.resourceClaims, or the claim for the
// pod's extended resources.
type PodClaim struct {
	// Name is the entry's name in the pod spec.
	Name string `json:"name"`
	// ResourceClaim is the claim's object name, empty until generated.
	ResourceClaim string   `json:"resourceClaim,omitempty"`
	Devices       []Device `json:"devices,omitempty"`
	// Matched is, per matchAttribute constraint of the claim that its
	// allocation binds, the value its devices share, as "<attribute>=<value>".
	Matched []string `json:"matched,omitempty"`
}

// Device is one allocated device.
type Device struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// Consumed is the capacity taken from a shared device.
	Consumed map[string]string `json:"consumed,omitempty"`
}

// Claim is one ResourceClaim.
type Claim struct {
	Namespace   string   `json:"namespace"`
	Name        string   `json:"name"`
	Allocated   bool     `json:"allocated"`
	ReservedFor []string `json:"reservedFor,omitempty"`
	Devices     []Device `json:"devices,omitempty"`
}

// Containers looks up what a running pod's containers were given.
type Containers func(*corev1.Pod) map[string]node.Container

// Collect reads the cluster state through the API.
func Collect(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, cluster string, containers Containers) (*Report, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	claims, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list device classes: %w", err)
	}
	knownClasses := map[string]bool{}
	for _, c := range classes.Items {
		knownClasses[c.Name] = true
	}
	findings := classFindings(ctx, classes.Items, slices.Items)
	events, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}

	r := &Report{APIVersion: APIVersion, Kind: Kind, Cluster: cluster}
	full := fullCapacities(slices.Items)
	attrs := deviceAttributes(slices.Items)
	claimByKey := map[string]*resourceapi.ResourceClaim{}
	allocatedOnNode := map[string]int{}
	for i := range claims.Items {
		c := &claims.Items[i]
		claimByKey[c.Namespace+"/"+c.Name] = c
		r.Claims = append(r.Claims, claimReport(c, full))
		if c.Status.Allocation != nil {
			r.Summary.AllocatedClaims++
			for _, res := range c.Status.Allocation.Devices.Results {
				allocatedOnNode[res.Pool]++
				r.Summary.AllocatedDevices++
			}
		}
	}
	r.Summary.Claims = len(claims.Items)
	published := map[string]int{}
	for _, s := range slices.Items {
		if s.Spec.NodeName != nil {
			published[*s.Spec.NodeName] += len(s.Spec.Devices)
		}
		r.Summary.PublishedDevices += len(s.Spec.Devices)
	}
	for _, n := range nodes.Items {
		r.Nodes = append(r.Nodes, Node{Name: n.Name, Labels: userLabels(n.Labels), PublishedDevices: published[n.Name], AllocatedDevices: allocatedOnNode[n.Name]})
	}
	r.Summary.Nodes = len(nodes.Items)
	warnings := lastWarnings(events.Items)
	for i := range pods.Items {
		p := podReport(&pods.Items[i], claimByKey, full, attrs, warnings, containers)
		if p.Reason == corev1.PodReasonUnschedulable {
			var found []string
			for _, c := range p.Claims {
				found = append(found, claimFindings(claimByKey[key(p.Namespace, c.ResourceClaim)], knownClasses, findings)...)
			}
			p.Message = withFindings(p.Message, found)
		}
		r.Pods = append(r.Pods, p)
		r.Summary.Pods++
		switch corev1.PodPhase(p.Phase) {
		case corev1.PodRunning:
			r.Summary.Running++
		case corev1.PodSucceeded:
			r.Summary.Succeeded++
		case corev1.PodFailed:
			r.Summary.Failed++
		default:
			r.Summary.Pending++
		}
	}
	if dyn != nil {
		preemptions, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + gang.ReasonPreempted})
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		if r.Gangs, err = collectGangs(ctx, dyn, pods.Items, nodes.Items, lastEvents(preemptions.Items)); err != nil {
			return nil, err
		}
		explainByGang(r.Pods, pods.Items, r.Gangs)
	}
	explainByWarning(r.Pods, pods.Items, warnings)
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Name < r.Nodes[j].Name })
	sort.Slice(r.Pods, func(i, j int) bool {
		return key(r.Pods[i].Namespace, r.Pods[i].Name) < key(r.Pods[j].Namespace, r.Pods[j].Name)
	})
	sort.Slice(r.Claims, func(i, j int) bool {
		return key(r.Claims[i].Namespace, r.Claims[i].Name) < key(r.Claims[j].Namespace, r.Claims[j].Name)
	})
	return r, nil
}

func key(ns, name string) string { return ns + "/" + name }

func claimReport(c *resourceapi.ResourceClaim, full capacities) Claim {
	out := Claim{Namespace: c.Namespace, Name: c.Name, Allocated: c.Status.Allocation != nil}
	for _, ref := range c.Status.ReservedFor {
		out.ReservedFor = append(out.ReservedFor, ref.Resource+"/"+ref.Name)
	}
	out.Devices = devices(c, full)
	return out
}

// capacities maps driver/pool/device to the device's capacity.
type capacities map[string]map[resourceapi.QualifiedName]resource.Quantity

func fullCapacities(slices []resourceapi.ResourceSlice) capacities {
	out := capacities{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if len(d.Capacity) == 0 {
				continue
			}
			m := map[resourceapi.QualifiedName]resource.Quantity{}
			for name, c := range d.Capacity {
				m[name] = c.Value
			}
			out[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name] = m
		}
	}
	return out
}

// devices lists a claim's allocated devices; consumed capacity is shown
// only for a share, not when the claim took all of the device.
func devices(c *resourceapi.ResourceClaim, full capacities) []Device {
	if c == nil || c.Status.Allocation == nil {
		return nil
	}
	var out []Device
	for _, res := range c.Status.Allocation.Devices.Results {
		d := Device{Request: res.Request, Driver: res.Driver, Pool: res.Pool, Device: res.Device}
		total := full[res.Driver+"/"+res.Pool+"/"+res.Device]
		// Capacity consumed at zero (compute not reserved) says nothing
		// about whether the claim shares the device.
		partial := false
		for name, q := range res.ConsumedCapacity {
			if t, ok := total[name]; q.Sign() > 0 && (!ok || q.Cmp(t) < 0) {
				partial = true
			}
		}
		for name, q := range res.ConsumedCapacity {
			if !partial {
				break
			}
			if q.IsZero() {
				continue
			}
			if d.Consumed == nil {
				d.Consumed = map[string]string{}
			}
			d.Consumed[string(name)] = q.String()
		}
		out = append(out, d)
	}
	return out
}

// attributeIndex maps driver/pool/device to the device's attributes.
type attributeIndex map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

func deviceAttributes(slices []resourceapi.ResourceSlice) attributeIndex {
	out := attributeIndex{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name] = d.Attributes
		}
	}
	return out
}

// matched reports, for each matchAttribute constraint of an allocated
// claim, the value its devices share: what "the GPU and the NIC on one
// PCIe switch" came to. A constraint on a firstAvailable rung that was
// not chosen binds no device and is left out.
func matched(c *resourceapi.ResourceClaim, attrs attributeIndex) []string {
	if c == nil || c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, con := range c.Spec.Devices.Constraints {
		if con.MatchAttribute == nil {
			continue
		}
		name := string(*con.MatchAttribute)
		value, bound := "", false
		for _, r := range c.Status.Allocation.Devices.Results {
			if !constrains(con.Requests, r.Request) {
				continue
			}
			if v, ok := attributeValue(attrs[r.Driver+"/"+r.Pool+"/"+r.Device], r.Driver, name); ok {
				value, bound = v, true
			}
		}
		if bound {
			out = append(out, name+"="+value)
		}
	}
	return out
}

// constrains says whether a constraint over requests (all when empty)
// applies to a result of request ("name" or "name/subrequest").
func constrains(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	parent, _, _ := strings.Cut(request, "/")
	for _, r := range requests {
		if r == request || r == parent {
			return true
		}
	}
	return false
}

// attributeValue looks a fully qualified attribute up on a device of a
// driver, whose own attributes may be published without its domain.
func attributeValue(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, driver, name string) (string, bool) {
	a, ok := attrs[resourceapi.QualifiedName(name)]
	if domain, id, found := strings.Cut(name, "/"); !ok && found && domain == driver {
		a, ok = attrs[resourceapi.QualifiedName(id)]
	}
	if !ok {
		return "", false
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue, true
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue), true
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue), true
	case a.VersionValue != nil:
		return *a.VersionValue, true
	}
	return "", false
}

func podReport(pod *corev1.Pod, claims map[string]*resourceapi.ResourceClaim, full capacities, attrs attributeIndex, warnings map[types.UID]corev1.Event, containers Containers) Pod {
	p := Pod{
		Namespace:     pod.Namespace,
		Name:          pod.Name,
		SchedulerName: pod.Spec.SchedulerName,
		Node:          pod.Spec.NodeName,
		Phase:         string(pod.Status.Phase),
	}
	for _, pc := range pod.Spec.ResourceClaims {
		entry := PodClaim{Name: pc.Name}
		if pc.ResourceClaimName != nil {
			entry.ResourceClaim = *pc.ResourceClaimName
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == pc.Name && st.ResourceClaimName != nil {
				entry.ResourceClaim = *st.ResourceClaimName
			}
		}
		if entry.ResourceClaim != "" {
			c := claims[pod.Namespace+"/"+entry.ResourceClaim]
			entry.Devices = devices(c, full)
			entry.Matched = matched(c, attrs)
		}
		p.Claims = append(p.Claims, entry)
	}
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil {
		p.Claims = append(p.Claims, PodClaim{Name: ExtendedResourcesClaim, ResourceClaim: ext.ResourceClaimName,
			Devices: devices(claims[pod.Namespace+"/"+ext.ResourceClaimName], full)})
	}
	if pod.Status.Phase == corev1.PodRunning {
		if containers != nil {
			p.Containers = containers(pod)
		}
		return p
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			p.Reason, p.Message = c.Reason, c.Message
		}
	}
	// Once bound, a pod's problem is on its node: the scheduler's earlier
	// complaints no longer apply.
	if ev, ok := warnings[pod.UID]; ok && pod.Spec.NodeName != "" {
		p.Reason, p.Message = ev.Reason, ev.Message
	}
	return p
}

// explainByWarning gives a pod that neither the scheduler nor its gang
// explains the newest warning on it (a claim template that does not
// exist). It comes after the gang's condition, which is current, where
// a warning may be from before the gang's PodGroup existed.
func explainByWarning(pods []Pod, raw []corev1.Pod, warnings map[types.UID]corev1.Event) {
	for i := range pods {
		p := &pods[i]
		if p.Reason != "" || p.Phase == string(corev1.PodRunning) || p.Phase == string(corev1.PodSucceeded) {
			continue
		}
		if ev, ok := warnings[raw[i].UID]; ok {
			p.Reason, p.Message = ev.Reason, ev.Message
		}
	}
}

// explainByGang gives a pod that nothing else explains its gang's reason:
// a member held back before scheduling (a gang short of members, an
// invalid gang) has no condition of its own.
func explainByGang(pods []Pod, raw []corev1.Pod, gangs []Gang) {
	why := map[string]Gang{}
	for _, g := range gangs {
		if g.Message != "" {
			why[key(g.Namespace, g.Name)] = g
		}
	}
	for i := range pods {
		p := &pods[i]
		if p.Reason != "" || p.Phase == string(corev1.PodRunning) || p.Phase == string(corev1.PodSucceeded) {
			continue
		}
		if g, ok := why[key(raw[i].Namespace, gangOf(&raw[i]))]; ok {
			p.Reason, p.Message = g.Reason, g.Message // the message names the gang
		}
	}
}

// lastWarnings returns the newest warning event of every object, leaving
// out scheduling failures: those are reported through the PodScheduled
// condition.
func lastWarnings(events []corev1.Event) map[types.UID]corev1.Event {
	var kept []corev1.Event
	for _, ev := range events {
		if ev.Reason != "FailedScheduling" {
			kept = append(kept, ev)
		}
	}
	return lastEvents(kept)
}

// lastEvents returns the newest event of every object. Event timestamps
// have a resolution of one second; of two events in the same second, the
// one the API server wrote last (the higher resourceVersion) is newer.
func lastEvents(events []corev1.Event) map[types.UID]corev1.Event {
	out := map[types.UID]corev1.Event{}
	for _, ev := range events {
		uid := ev.InvolvedObject.UID
		if old, ok := out[uid]; !ok || newer(ev, old) {
			out[uid] = ev
		}
	}
	return out
}

func newer(a, b corev1.Event) bool {
	ta, tb := eventTime(a), eventTime(b)
	if !ta.Equal(&tb) {
		return ta.After(tb.Time)
	}
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && ra > rb
}

func eventTime(ev corev1.Event) metav1.Time {
	if !ev.LastTimestamp.IsZero() {
		return ev.LastTimestamp
	}
	if !ev.EventTime.IsZero() {
		return metav1.NewTime(ev.EventTime.Time)
	}
	return ev.CreationTimestamp
}

// userLabels drops the labels every node has.
func userLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		switch k {
		case corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable:
			continue
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
