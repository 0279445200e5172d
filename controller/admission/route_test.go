package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestRouter(t *testing.T) {
	strataGPU := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia-gpu.strata.sh"}, Spec: resourceapi.DeviceClassSpec{
		Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "nvidia.strata.sh"`}}},
		ExtendedResourceName: ptr.To("nvidia.com/gpu"),
	}}
	other := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}, Spec: resourceapi.DeviceClassSpec{
		Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}},
		ExtendedResourceName: ptr.To("example.com/gpu"),
	}}
	anyDevice := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "any"}}
	request := func(name, class, selector string) resourceapi.DeviceRequest {
		r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
		if selector != "" {
			r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		return r
	}
	claim := func(name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}
	}
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "ml"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("gpu", "nvidia-gpu.strata.sh", "")}}}}}
	firstAvailable := claim("either", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "example", DeviceClassName: "gpu.example.com"},
		{Name: "strata", DeviceClassName: "nvidia-gpu.strata.sh"},
	}})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(strataGPU, other, anyDevice, template, firstAvailable,
		claim("example", request("gpu", "gpu.example.com", "")),
		claim("picks-strata", request("gpu", "gpu.example.com", `device.driver == "rdma.strata.sh"`)),
		claim("any", request("dev", "any", "")),
	).Build()
	router := &Router{Reader: reader, Scheduler: "strata-scheduler"}

	type pod = func(*corev1.Pod)
	withClaim := func(name string) pod {
		return func(p *corev1.Pod) {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(name)})
		}
	}
	withTemplate := func(name string) pod {
		return func(p *corev1.Pod) {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "c", ResourceClaimTemplateName: ptr.To(name)})
		}
	}
	requesting := func(res string) pod {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}
		}
	}
	scheduler := func(name string) pod { return func(p *corev1.Pod) { p.Spec.SchedulerName = name } }

	for _, tc := range []struct {
		name string
		pod  []pod
		op   admissionv1.Operation
		// routed: the pod gets strata-scheduler; denied: refused with a
		// message containing it; else allowed unchanged.
		routed bool
		denied string
	}{
		{name: "a claim template naming a Strata class", pod: []pod{withTemplate("one-gpu")}, routed: true},
		{name: "a claim naming another driver's class", pod: []pod{withClaim("example")}},
		{name: "a claim whose selector picks a Strata driver", pod: []pod{withClaim("picks-strata")}, routed: true},
		{name: "a class that selects every device", pod: []pod{withClaim("any")}, routed: true},
		{name: "a subrequest naming a Strata class", pod: []pod{withClaim("either")}, routed: true},
		{name: "a claim not made yet", pod: []pod{withClaim("later")}, routed: true},
		{name: "a template not made yet", pod: []pod{withTemplate("later")}, routed: true},
		{name: "the extended resource a Strata class maps", pod: []pod{requesting("nvidia.com/gpu")}, routed: true},
		{name: "a Strata class's implicit extended resource", pod: []pod{requesting("deviceclass.resource.kubernetes.io/nvidia-gpu.strata.sh")}, routed: true},
		{name: "another driver's extended resource", pod: []pod{requesting("example.com/gpu")}},
		{name: "a device plugin's resource", pod: []pod{requesting("vendor.example/fpga")}},
		{name: "a pod without devices", pod: nil},
		{name: "already strata-scheduler's", pod: []pod{withTemplate("one-gpu"), scheduler("strata-scheduler")}},
		{name: "another scheduler named", pod: []pod{withTemplate("one-gpu"), scheduler("volcano")},
			denied: `spec.schedulerName: "volcano" may not schedule this pod: it uses ResourceClaimTemplate one-gpu, whose request gpu names DeviceClass nvidia-gpu.strata.sh, which selects Strata's devices`},
		{name: "another scheduler without Strata devices", pod: []pod{withClaim("example"), scheduler("volcano")}},
		{name: "an update", pod: []pod{withTemplate("one-gpu")}, op: admissionv1.Update},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml"},
				Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
			for _, f := range tc.pod {
				f(p)
			}
			raw, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			op := tc.op
			if op == "" {
				op = admissionv1.Create
			}
			resp := router.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "uid", Operation: op, Kind: podKind, Namespace: "ml", Object: runtime.RawExtension{Raw: raw}}})
			switch {
			case tc.denied != "":
				if resp.Allowed || !strings.Contains(message(resp), tc.denied) || resp.Result.Code != http.StatusUnprocessableEntity {
					t.Fatalf("response %+v, want denied (422) with %q", resp.Result, tc.denied)
				}
			case tc.routed:
				if !resp.Allowed {
					t.Fatalf("denied: %s", message(resp))
				}
				var patch []map[string]any
				if err := json.Unmarshal(resp.Patch, &patch); err != nil || len(patch) != 1 || patch[0]["path"] != "/spec/schedulerName" || patch[0]["value"] != "strata-scheduler" {
					t.Fatalf("patch %s (%v), want spec.schedulerName set to strata-scheduler", resp.Patch, err)
				}
			default:
				if !resp.Allowed || len(resp.Patch) > 0 {
					t.Fatalf("response allowed=%v patch=%s (%s), want allowed unchanged", resp.Allowed, resp.Patch, message(resp))
				}
			}
		})
	}
}
