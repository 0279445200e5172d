// Package admission is strata-controller's validating webhook: it refuses
// Strata input that the scheduler or the kubelet plugin would only refuse
// later (a pod that never schedules, a claim that never prepares), when it
// is applied, with a message that names the field.
//
//   - /validate-pods: the gang annotations of pods.
//   - /validate-podgroups: PodGroups' spec and gang annotations.
//   - /validate-clusternetworktopologies: the layers of a
//     ClusterNetworkTopology.
//   - /validate-deviceconfigs: the opaque configs of ResourceClaims,
//     ResourceClaimTemplates and DeviceClasses for nvidia.strata.sh
//     (GpuConfig), rdma.strata.sh (NicConfig), ascend.strata.sh
//     (NpuConfig) and cambricon.strata.sh (MluConfig).
//
// An update may keep a mistake the object already had (so that old
// objects can still be relabelled or have their finalizers removed), but
// not add one. Operations other than CREATE and UPDATE are allowed.
package admission

import (
	"encoding/json"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Paths the handlers are served at; the chart's
// ValidatingWebhookConfiguration names them.
const (
	PodsPath                     = "/validate-pods"
	PodGroupsPath                = "/validate-podgroups"
	ClusterNetworkTopologiesPath = "/validate-clusternetworktopologies"
	DeviceConfigsPath            = "/validate-deviceconfigs"
)

// Handlers returns every handler by path.
func Handlers() map[string]admission.Handler {
	return map[string]admission.Handler{
		PodsPath:                     admission.HandlerFunc(validatePod),
		PodGroupsPath:                admission.HandlerFunc(validatePodGroup),
		ClusterNetworkTopologiesPath: admission.HandlerFunc(validateTopology),
		DeviceConfigsPath:            admission.HandlerFunc(validateDeviceConfigs),
	}
}

// Register serves every handler on srv.
func Register(srv webhook.Server) {
	for path, h := range Handlers() {
		srv.Register(path, (&admission.Webhook{Handler: h}).WithRecoverPanic(true))
	}
}

// validator returns the mistakes of one object, given its JSON.
type validator func(raw []byte) (field.ErrorList, error)

// review runs validate on the request's object. On UPDATE only the
// mistakes the old object did not have are refused.
func review(req admission.Request, validate validator) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	errs, err := validate(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(errs) > 0 && req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old, err := validate(req.OldObject.Raw)
		if err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		errs = added(errs, old)
	}
	return verdict(errs)
}

// added returns the errors of now that were not in before.
func added(now, before field.ErrorList) field.ErrorList {
	had := make(map[string]bool, len(before))
	for _, e := range before {
		had[describe(e)] = true
	}
	var out field.ErrorList
	for _, e := range now {
		if !had[describe(e)] {
			out = append(out, e)
		}
	}
	return out
}

// verdict allows an object without mistakes and refuses one with, as
// Invalid (422), every mistake named in the message and in the causes.
func verdict(errs field.ErrorList) admission.Response {
	if len(errs) == 0 {
		return admission.Allowed("")
	}
	msgs := make([]string, 0, len(errs))
	causes := make([]metav1.StatusCause, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, describe(e))
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(e.Type), Field: e.Field, Message: body(e)})
	}
	resp := admission.Denied(strings.Join(msgs, "; "))
	resp.Result.Code = http.StatusUnprocessableEntity
	resp.Result.Reason = metav1.StatusReasonInvalid
	resp.Result.Details = &metav1.StatusDetails{Causes: causes}
	return resp
}

// wrapped is a mistake found by a parser whose message already says what
// is wrong: it reads "<field>: <detail>".
func wrapped(p *field.Path, detail string) *field.Error {
	return field.Invalid(p, field.OmitValueType{}, detail)
}

// describe renders a mistake as "<field>: <what is wrong>".
func describe(e *field.Error) string { return e.Field + ": " + body(e) }

func body(e *field.Error) string {
	if e.Type == field.ErrorTypeInvalid && e.BadValue == (field.OmitValueType{}) {
		return e.Detail
	}
	return e.ErrorBody()
}

// decode reads an object of the request; the API server sends canonical
// JSON.
func decode(raw []byte, into any) error {
	return json.Unmarshal(raw, into)
}
