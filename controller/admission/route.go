package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// RoutePodsPath is where the pod routing webhook is served; the chart's
// MutatingWebhookConfiguration names it.
const RoutePodsPath = "/route-pods"

// DefaultSchedulerName is the scheduler a pod names when it names none.
const DefaultSchedulerName = corev1.DefaultSchedulerName

// strataDomain is the domain of every Strata driver name.
const strataDomain = ".strata.sh"

// implicitExtendedResourcePrefix names the extended resource every
// DeviceClass maps without saying so (KEP-5004).
const implicitExtendedResourcePrefix = resourceapi.ResourceDeviceClassPrefix

// Router sends every pod that may get devices of Strata's drivers to
// strata-scheduler, the one scheduler that allocates them: a pod that
// names no scheduler is given Scheduler; a pod that names another one is
// refused, naming spec.schedulerName. A pod may get Strata's devices
// through a ResourceClaim or a ResourceClaimTemplate one of whose requests
// names a Strata DeviceClass or selects a Strata driver, or through an
// extended resource a Strata DeviceClass maps. A claim, template or class
// that cannot be read yet (a claim created after its pod) counts as
// Strata's: strata-scheduler allocates every driver's devices, so routing
// a pod there is always safe.
type Router struct {
	// Reader reads ResourceClaims, ResourceClaimTemplates and
	// DeviceClasses (an uncached reader: a claim made just before its pod
	// must be seen).
	Reader client.Reader
	// Scheduler is strata-scheduler's name.
	Scheduler string
}

// Register serves the router at RoutePodsPath.
func (r *Router) Register(srv webhook.Server) {
	srv.Register(RoutePodsPath, (&admission.Webhook{Handler: r}).WithRecoverPanic(true))
}

// Handle implements admission.Handler.
func (r *Router) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := decode(req.Object.Raw, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if pod.Spec.SchedulerName == r.Scheduler {
		return admission.Allowed("")
	}
	why, err := r.usesStrata(ctx, pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if why == "" {
		return admission.Allowed("")
	}
	name := pod.Spec.SchedulerName
	if name != "" && name != DefaultSchedulerName {
		resp := admission.Denied(fmt.Sprintf("spec.schedulerName: %q may not schedule this pod: it %s, and devices of Strata's drivers are allocated by %s only (set spec.schedulerName: %s or leave it unset)", name, why, r.Scheduler, r.Scheduler))
		resp.Result.Code = http.StatusUnprocessableEntity
		return resp
	}
	klog.FromContext(ctx).V(2).Info("Routing pod to strata-scheduler", "pod", klog.KRef(pod.Namespace, pod.Name), "generateName", pod.GenerateName, "reason", why)
	patch := []map[string]any{{"op": "add", "path": "/spec/schedulerName", "value": r.Scheduler}}
	raw, err := json.Marshal(patch)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp := admission.Allowed("routed to " + r.Scheduler + ": the pod " + why)
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = raw, &pt
	return resp
}

// usesStrata says why pod may get devices of Strata's drivers, "" when it
// cannot.
func (r *Router) usesStrata(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, res := range podResources(pod) {
		why, err := r.extendedResource(ctx, res)
		if why != "" || err != nil {
			return why, err
		}
	}
	for _, pc := range pod.Spec.ResourceClaims {
		switch {
		case pc.ResourceClaimName != nil:
			claim := &resourceapi.ResourceClaim{}
			err := r.Reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: *pc.ResourceClaimName}, claim)
			if apierrors.IsNotFound(err) {
				return fmt.Sprintf("uses ResourceClaim %s, which does not exist yet", *pc.ResourceClaimName), nil
			}
			if err != nil {
				return "", fmt.Errorf("read ResourceClaim %s: %w", *pc.ResourceClaimName, err)
			}
			why, err := r.spec(ctx, &claim.Spec)
			if why != "" || err != nil {
				return prefix("uses ResourceClaim "+claim.Name, why), err
			}
		case pc.ResourceClaimTemplateName != nil:
			tmpl := &resourceapi.ResourceClaimTemplate{}
			err := r.Reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: *pc.ResourceClaimTemplateName}, tmpl)
			if apierrors.IsNotFound(err) {
				return fmt.Sprintf("uses ResourceClaimTemplate %s, which does not exist yet", *pc.ResourceClaimTemplateName), nil
			}
			if err != nil {
				return "", fmt.Errorf("read ResourceClaimTemplate %s: %w", *pc.ResourceClaimTemplateName, err)
			}
			why, err := r.spec(ctx, &tmpl.Spec.Spec)
			if why != "" || err != nil {
				return prefix("uses ResourceClaimTemplate "+tmpl.Name, why), err
			}
		}
	}
	return "", nil
}

func prefix(what, why string) string {
	if why == "" {
		return ""
	}
	return what + ", whose " + why
}

// spec says which request of a claim may get Strata's devices.
func (r *Router) spec(ctx context.Context, spec *resourceapi.ResourceClaimSpec) (string, error) {
	for _, req := range spec.Devices.Requests {
		if req.Exactly != nil {
			why, err := r.request(ctx, req.Exactly.DeviceClassName, req.Exactly.Selectors)
			if why != "" || err != nil {
				return "request " + req.Name + " " + why, err
			}
		}
		for _, sub := range req.FirstAvailable {
			why, err := r.request(ctx, sub.DeviceClassName, sub.Selectors)
			if why != "" || err != nil {
				return "request " + req.Name + "/" + sub.Name + " " + why, err
			}
		}
	}
	return "", nil
}

// request says whether a request with this class and these selectors may
// get Strata's devices.
func (r *Router) request(ctx context.Context, className string, selectors []resourceapi.DeviceSelector) (string, error) {
	if mentionsStrata(selectors) {
		return "selects a Strata driver", nil
	}
	class := &resourceapi.DeviceClass{}
	err := r.Reader.Get(ctx, types.NamespacedName{Name: className}, class)
	if apierrors.IsNotFound(err) {
		return "names DeviceClass " + className + ", which does not exist yet", nil
	}
	if err != nil {
		return "", fmt.Errorf("read DeviceClass %s: %w", className, err)
	}
	if strataClass(class) {
		return "names DeviceClass " + className + ", which selects Strata's devices", nil
	}
	return "", nil
}

// strataClass reports whether a class may select devices of Strata's
// drivers: one of its selectors names a Strata driver or attribute, or it
// has no selector at all (every device of every driver).
func strataClass(class *resourceapi.DeviceClass) bool {
	return len(class.Spec.Selectors) == 0 || mentionsStrata(class.Spec.Selectors)
}

func mentionsStrata(selectors []resourceapi.DeviceSelector) bool {
	for _, s := range selectors {
		if s.CEL != nil && strings.Contains(s.CEL.Expression, strataDomain) {
			return true
		}
	}
	return false
}

// extendedResource says whether res is an extended resource that a Strata
// DeviceClass maps, explicitly (spec.extendedResourceName) or implicitly
// (deviceclass.resource.kubernetes.io/<class>).
func (r *Router) extendedResource(ctx context.Context, res corev1.ResourceName) (string, error) {
	name := string(res)
	if className, ok := strings.CutPrefix(name, implicitExtendedResourcePrefix); ok {
		why, err := r.request(ctx, className, nil)
		if why != "" {
			why = "requests " + name + " and " + why
		}
		return why, err
	}
	if !strings.Contains(name, "/") || strings.HasPrefix(name, "kubernetes.io/") || strings.HasPrefix(name, "requests.") {
		return "", nil
	}
	classes := &resourceapi.DeviceClassList{}
	if err := r.Reader.List(ctx, classes); err != nil {
		return "", fmt.Errorf("list DeviceClasses: %w", err)
	}
	for i := range classes.Items {
		c := &classes.Items[i]
		if c.Spec.ExtendedResourceName != nil && *c.Spec.ExtendedResourceName == name && strataClass(c) {
			return "requests " + name + ", which DeviceClass " + c.Name + " maps onto Strata's devices", nil
		}
	}
	return "", nil
}

// podResources lists the extended resources the pod's containers ask for.
func podResources(pod *corev1.Pod) []corev1.ResourceName {
	seen := map[corev1.ResourceName]bool{}
	var out []corev1.ResourceName
	add := func(list corev1.ResourceList) {
		for name := range list {
			if !seen[name] && strings.Contains(string(name), "/") {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			add(cs[i].Resources.Requests)
			add(cs[i].Resources.Limits)
		}
	}
	return out
}
