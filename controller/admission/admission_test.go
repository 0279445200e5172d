package admission

import (
	"context"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

var (
	podKind      = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podGroupKind = metav1.GroupVersionKind{Group: "scheduling.sigs.k8s.io", Version: "v1alpha1", Kind: "PodGroup"}
	topologyKind = metav1.GroupVersionKind{Group: "topology.strata.sh", Version: "v1alpha1", Kind: "ClusterNetworkTopology"}
	claimKind    = metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"}
	templateKind = metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaimTemplate"}
	classKind    = metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "DeviceClass"}
)

func request(op admissionv1.Operation, kind metav1.GroupVersionKind, object, old string) admission.Request {
	r := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "uid", Operation: op, Kind: kind}}
	if object != "" {
		r.Object = runtime.RawExtension{Raw: []byte(object)}
	}
	if old != "" {
		r.OldObject = runtime.RawExtension{Raw: []byte(old)}
	}
	return r
}

// handle runs the handler served at path, as the webhook server would.
func handle(t *testing.T, path string, req admission.Request) admission.Response {
	t.Helper()
	h, ok := Handlers()[path]
	if !ok {
		t.Fatalf("no handler at %s", path)
	}
	return h.Handle(context.Background(), req)
}

func message(r admission.Response) string {
	if r.Result == nil {
		return ""
	}
	return r.Result.Message
}

// claim is a ResourceClaim whose config is cfg (the body of an entry of
// spec.devices.config) for the given requests.
func claim(requests, cfg string) string {
	return `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"ml"},
	"spec":{"devices":{"requests":` + requests + `,"config":[` + cfg + `]}}}`
}

func opaque(params string) string {
	return `{"opaque":{"driver":"nvidia.strata.sh","parameters":` + params + `}}`
}

// rdma is an entry of spec.devices.config for driver rdma.strata.sh.
func rdma(params string) string {
	return `{"opaque":{"driver":"rdma.strata.sh","parameters":` + params + `}}`
}

// cambricon is an entry of spec.devices.config for driver
// cambricon.strata.sh.
func cambricon(params string) string {
	return `{"opaque":{"driver":"cambricon.strata.sh","parameters":` + params + `}}`
}

// class is a DeviceClass named name whose config is cfg.
func class(name, cfg string) string {
	return `{"metadata":{"name":"` + name + `"},"spec":{"config":[` + cfg + `]}}`
}

const (
	sharedRequest = `[{"name":"gpu","exactly":{"deviceClassName":"nvidia-shared.strata.sh"}}]`
	migRequest    = `[{"name":"mig","exactly":{"deviceClassName":"nvidia-mig.strata.sh"}}]`
	mpsConfig     = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`

	nicRequest = `[{"name":"nic","exactly":{"deviceClassName":"rdma-nic.strata.sh","capacity":{"requests":{"bandwidth":"100G"}}}}]`
	vfRequest  = `[{"name":"vf","exactly":{"deviceClassName":"rdma-vf.strata.sh"}}]`
	// Either a virtual function or a share of a NIC.
	netRequest = `[{"name":"net","firstAvailable":[{"name":"vf","deviceClassName":"rdma-vf.strata.sh"},{"name":"nic","deviceClassName":"rdma-nic.strata.sh"}]}]`
	vfConfig   = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"vlan":100,"vlanQoS":3,"trust":true,"spoofCheck":false,"mtu":9000,"maxTxRate":"25G"}}`
	nicConfig  = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig"}`

	mluRequest  = `[{"name":"mlu","exactly":{"deviceClassName":"cambricon-mlu.strata.sh"}}]`
	smluRequest = `[{"name":"smlu","exactly":{"deviceClassName":"cambricon-smlu.strata.sh","capacity":{"requests":{"vcore":"50","vmemory":"4Gi"}}}}]`
	mluConfig   = `{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"None"}`
)

// Each class of mistake: the manifest with it is refused with a message
// that names the field, the same manifest without it is allowed.
func TestMistakesAreRefusedWithTheirField(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		kind      metav1.GroupVersionKind
		bad, good string
		want      string
	}{
		{
			name: "pod, Strata key",
			path: PodsPath, kind: podKind,
			bad:  `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"scheduling.strata.sh/name":"job","scheduling.strata.sh/network-topology-spec":"{\"gatherStrategy\":[{\"layer\":\"BlockLayer\",\"strategy\":\"Gather\"}]}"}}}`,
			good: `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"scheduling.strata.sh/name":"job","scheduling.strata.sh/network-topology-spec":"{\"gatherStrategy\":[{\"layer\":\"BlockLayer\",\"strategy\":\"MustGather\"}]}"}}}`,
			want: `metadata.annotations[scheduling.strata.sh/network-topology-spec]: gatherStrategy[0].strategy: "Gather" is neither MustGather nor PreferGather`,
		},
		{
			name: "pod, Koordinator key",
			path: PodsPath, kind: podKind,
			bad:  `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/min-available":"two"}}}`,
			good: `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/min-available":"2"}}}`,
			want: `metadata.annotations[gang.scheduling.koordinator.sh/min-available]: "two" is not a positive integer`,
		},
		{
			name: "pod, total-number below min-available",
			path: PodsPath, kind: podKind,
			bad:  `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/min-available":"4","gang.scheduling.koordinator.sh/total-number":"3"}}}`,
			good: `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/min-available":"4","gang.scheduling.koordinator.sh/total-number":"4"}}}`,
			want: `metadata.annotations[gang.scheduling.koordinator.sh/total-number]: 3 is less than the gang's minimum of 4 members`,
		},
		{
			name: "pod, group in another namespace",
			path: PodsPath, kind: podKind,
			bad:  `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/groups":"[\"ps\",\"team-b/train\"]"}}}`,
			good: `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/groups":"[\"ps\",\"ml/train\"]"}}}`,
			want: `metadata.annotations[gang.scheduling.koordinator.sh/groups]: "team-b/train" is a gang of namespace "team-b"; a group lists only gangs of its own namespace, "ml"`,
		},
		{
			name: "PodGroup, group in another namespace",
			path: PodGroupsPath, kind: podGroupKind,
			bad:  `{"metadata":{"name":"train","namespace":"ml","annotations":{"scheduling.strata.sh/groups":"[\"ml/ps\",\"team-b/train\"]"}},"spec":{"minMember":8}}`,
			good: `{"metadata":{"name":"train","namespace":"ml","annotations":{"scheduling.strata.sh/groups":"[\"ml/ps\",\"ml/train\"]"}},"spec":{"minMember":8}}`,
			want: `metadata.annotations[scheduling.strata.sh/groups]: "team-b/train" is a gang of namespace "team-b"; a group lists only gangs of its own namespace, "ml"`,
		},
		{
			name: "PodGroup spec",
			path: PodGroupsPath, kind: podGroupKind,
			bad:  `{"metadata":{"name":"train","namespace":"ml"},"spec":{"minMember":8,"scheduleTimeoutSeconds":0}}`,
			good: `{"metadata":{"name":"train","namespace":"ml"},"spec":{"minMember":8,"scheduleTimeoutSeconds":300}}`,
			want: `spec.scheduleTimeoutSeconds: Invalid value: 0: must be at least 1`,
		},
		{
			name: "PodGroup minResources",
			path: PodGroupsPath, kind: podGroupKind,
			bad:  `{"metadata":{"name":"train","namespace":"ml"},"spec":{"minMember":8,"minResources":{"cpu":"-1"}}}`,
			good: `{"metadata":{"name":"train","namespace":"ml"},"spec":{"minMember":8,"minResources":{"cpu":"1"}}}`,
			want: `spec.minResources[cpu]: Invalid value: "-1": must not be negative`,
		},
		{
			name: "PodGroup annotations",
			path: PodGroupsPath, kind: podGroupKind,
			bad:  `{"metadata":{"name":"train","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/total-number":"4"}},"spec":{"minMember":8}}`,
			good: `{"metadata":{"name":"train","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/total-number":"8"}},"spec":{"minMember":8}}`,
			want: `metadata.annotations[gang.scheduling.koordinator.sh/total-number]: 4 is less than the gang's minimum of 8 members`,
		},
		{
			name: "ClusterNetworkTopology label key",
			path: ClusterNetworkTopologiesPath, kind: topologyKind,
			bad:  `{"metadata":{"name":"net"},"spec":{"networkTopologySpec":[{"topologyLayer":"BlockLayer","labelKey":["network/block id"]},{"topologyLayer":"NodeTopologyLayer","parentTopologyLayer":"BlockLayer"}]}}`,
			good: `{"metadata":{"name":"net"},"spec":{"networkTopologySpec":[{"topologyLayer":"BlockLayer","labelKey":["network/block-id"]},{"topologyLayer":"NodeTopologyLayer","parentTopologyLayer":"BlockLayer"}]}}`,
			want: `spec.networkTopologySpec[0].labelKey[0]: Invalid value: "network/block id"`,
		},
		{
			name: "ClusterNetworkTopology unknown parent",
			path: ClusterNetworkTopologiesPath, kind: topologyKind,
			bad:  `{"metadata":{"name":"net"},"spec":{"networkTopologySpec":[{"topologyLayer":"BlockLayer","labelKey":["block"]},{"topologyLayer":"NodeTopologyLayer","parentTopologyLayer":"Blocklayer"}]}}`,
			good: `{"metadata":{"name":"net"},"spec":{"networkTopologySpec":[{"topologyLayer":"BlockLayer","labelKey":["block"]},{"topologyLayer":"NodeTopologyLayer","parentTopologyLayer":"BlockLayer"}]}}`,
			want: `spec.networkTopologySpec[1].parentTopologyLayer: Not found: "Blocklayer"`,
		},
		{
			name: "ResourceClaim, unknown field",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(sharedRequest, opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"stratgy":"MPS"}}`)),
			good: claim(sharedRequest, opaque(mpsConfig)),
			want: `spec.devices.config[0].opaque.parameters: decode GpuConfig: unknown field "sharing.stratgy"`,
		},
		{
			name: "ResourceClaim, limit out of range",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(sharedRequest, opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimit":150}}}`)),
			good: claim(sharedRequest, opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"HAMiCore","hamiCore":{"coreLimit":50}}}`)),
			want: `spec.devices.config[0].opaque.parameters: sharing.hamiCore.coreLimit: Invalid value: 150: must be between 1 and 100`,
		},
		{
			name: "ResourceClaim, wrong kind",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(sharedRequest, opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GPUConfig"}`)),
			good: claim(sharedRequest, opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig"}`)),
			want: `spec.devices.config[0].opaque.parameters: opaque config has apiVersion "config.strata.sh/v1alpha1" and kind "GPUConfig"`,
		},
		{
			name: "ResourceClaim, sharing on MIG (exactly)",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(migRequest, opaque(mpsConfig)),
			good: claim(sharedRequest, opaque(mpsConfig)),
			want: `spec.devices.config[0].opaque.parameters.sharing: Forbidden: only GPUs take a sharing configuration; request "mig" asks for MIG devices`,
		},
		{
			name: "ResourceClaim, sharing on MIG (firstAvailable)",
			path: DeviceConfigsPath, kind: claimKind,
			bad: claim(`[{"name":"gpu","firstAvailable":[{"name":"mig","deviceClassName":"nvidia-mig.strata.sh"},{"name":"shared","deviceClassName":"nvidia-shared.strata.sh"}]}]`,
				`{"requests":["gpu"],"opaque":{"driver":"nvidia.strata.sh","parameters":`+mpsConfig+`}}`),
			good: claim(`[{"name":"gpu","firstAvailable":[{"name":"mig","deviceClassName":"nvidia-mig.strata.sh"},{"name":"shared","deviceClassName":"nvidia-shared.strata.sh"}]}]`,
				`{"requests":["gpu/shared"],"opaque":{"driver":"nvidia.strata.sh","parameters":`+mpsConfig+`}}`),
			want: `spec.devices.config[0].opaque.parameters.sharing: Forbidden: only GPUs take a sharing configuration; request "gpu/mig" asks for MIG devices`,
		},
		{
			name: "ResourceClaimTemplate",
			path: DeviceConfigsPath, kind: templateKind,
			bad: `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + migRequest + `,"config":[` +
				opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`) + `]}}}}`,
			good: `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + migRequest + `,"config":[` +
				opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig"}`) + `]}}}}`,
			want: `spec.spec.devices.config[0].opaque.parameters.sharing: Forbidden: only GPUs take a sharing configuration; request "mig" asks for MIG devices`,
		},
		{
			name: "DeviceClass of MIG devices",
			path: DeviceConfigsPath, kind: classKind,
			bad:  `{"metadata":{"name":"nvidia-mig.strata.sh"},"spec":{"config":[` + opaque(mpsConfig) + `]}}`,
			good: `{"metadata":{"name":"nvidia-shared.strata.sh"},"spec":{"config":[` + opaque(mpsConfig) + `]}}`,
			want: `spec.config[0].opaque.parameters.sharing: Forbidden: only GPUs take a sharing configuration; DeviceClass nvidia-mig.strata.sh selects MIG devices`,
		},
		{
			name: "DeviceClass, unknown field",
			path: DeviceConfigsPath, kind: classKind,
			bad:  `{"metadata":{"name":"nvidia-shared.strata.sh"},"spec":{"config":[` + opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","computeShare":"Lots"}}`) + `]}}`,
			good: `{"metadata":{"name":"nvidia-shared.strata.sh"},"spec":{"config":[` + opaque(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","computeShare":"Unlimited"}}`) + `]}}`,
			want: `spec.config[0].opaque.parameters: sharing.computeShare: Unsupported value: "Lots"`,
		},
		{
			name: "ResourceClaim, RDMA unknown field",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(vfRequest, rdma(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"vlanId":100}}`)),
			good: claim(vfRequest, rdma(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"vlan":100}}`)),
			want: `spec.devices.config[0].opaque.parameters: decode NicConfig: unknown field "vf.vlanId"`,
		},
		{
			name: "ResourceClaim, Ascend driver mode",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(vfRequest, `{"opaque":{"driver":"ascend.strata.sh","parameters":{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","driver":"Copy"}}}`),
			good: claim(vfRequest, `{"opaque":{"driver":"ascend.strata.sh","parameters":{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","driver":"None"}}}`),
			want: `spec.devices.config[0].opaque.parameters: driver: Unsupported value: "Copy": supported values: "Mount", "None"`,
		},
		{
			name: "ResourceClaim, Ascend unknown field",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(vfRequest, `{"opaque":{"driver":"ascend.strata.sh","parameters":{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","vnpu":{}}}}`),
			good: claim(vfRequest, `{"opaque":{"driver":"ascend.strata.sh","parameters":{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig"}}}`),
			want: `spec.devices.config[0].opaque.parameters: decode NpuConfig: unknown field "vnpu"`,
		},
		{
			name: "ResourceClaim, Cambricon unknown field",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(mluRequest, cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"None","smlu":{"vcore":50}}`)),
			good: claim(mluRequest, cambricon(mluConfig)),
			want: `spec.devices.config[0].opaque.parameters: decode MluConfig: unknown field "smlu"`,
		},
		{
			name: "ResourceClaim, Cambricon cnmon mode",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(smluRequest, cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Sometimes"}`)),
			good: claim(smluRequest, cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Mount"}`)),
			want: `spec.devices.config[0].opaque.parameters: cnmon: Unsupported value: "Sometimes": supported values: "Mount", "None"`,
		},
		{
			name: "ResourceClaim, Cambricon driver given an NpuConfig",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(mluRequest, cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig"}`)),
			good: claim(mluRequest, cambricon(mluConfig)),
			want: `spec.devices.config[0].opaque.parameters: opaque config has apiVersion "config.strata.sh/v1alpha1" and kind "NpuConfig", want config.strata.sh/v1alpha1 and MluConfig`,
		},
		{
			name: "ResourceClaimTemplate, Cambricon unknown field",
			path: DeviceConfigsPath, kind: templateKind,
			bad:  `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + smluRequest + `,"config":[` + cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmonn":"None"}`) + `]}}}}`,
			good: `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + smluRequest + `,"config":[` + cambricon(mluConfig) + `]}}}}`,
			want: `spec.spec.devices.config[0].opaque.parameters: decode MluConfig: unknown field "cnmonn"`,
		},
		{
			name: "DeviceClass, Cambricon cnmon mode",
			path: DeviceConfigsPath, kind: classKind,
			bad:  class("cambricon-mlu.strata.sh", cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"mount"}`)),
			good: class("cambricon-mlu.strata.sh", cambricon(mluConfig)),
			want: `spec.config[0].opaque.parameters: cnmon: Unsupported value: "mount"`,
		},
		{
			name: "ResourceClaim, RDMA VLAN out of range",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(vfRequest, rdma(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"vlan":5000}}`)),
			good: claim(vfRequest, rdma(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"vlan":4094}}`)),
			want: `spec.devices.config[0].opaque.parameters: vf.vlan: Invalid value: 5000: must be between 1 and 4094`,
		},
		{
			name: "ResourceClaim, RDMA driver given a GpuConfig",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(nicRequest, rdma(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"GpuConfig"}`)),
			good: claim(nicRequest, rdma(nicConfig)),
			want: `spec.devices.config[0].opaque.parameters: opaque config has apiVersion "config.strata.sh/v1alpha1" and kind "GpuConfig", want config.strata.sh/v1alpha1 and NicConfig`,
		},
		{
			name: "ResourceClaim, vf section on a NIC (exactly)",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(nicRequest, rdma(vfConfig)),
			good: claim(vfRequest, rdma(vfConfig)),
			want: `spec.devices.config[0].opaque.parameters.vf: Forbidden: only SR-IOV virtual functions (DeviceClass rdma-vf.strata.sh) take a vf section; request "nic" asks for RDMA NICs (deviceClassName rdma-nic.strata.sh)`,
		},
		{
			name: "ResourceClaim, vf section on a NIC (firstAvailable)",
			path: DeviceConfigsPath, kind: claimKind,
			bad:  claim(netRequest, `{"requests":["net"],"opaque":{"driver":"rdma.strata.sh","parameters":`+vfConfig+`}}`),
			good: claim(netRequest, `{"requests":["net/vf"],"opaque":{"driver":"rdma.strata.sh","parameters":`+vfConfig+`}}`),
			want: `spec.devices.config[0].opaque.parameters.vf: Forbidden: only SR-IOV virtual functions (DeviceClass rdma-vf.strata.sh) take a vf section; request "net/nic" asks for RDMA NICs`,
		},
		{
			name: "ResourceClaimTemplate, vf section on a NIC",
			path: DeviceConfigsPath, kind: templateKind,
			bad:  `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + nicRequest + `,"config":[` + rdma(vfConfig) + `]}}}}`,
			good: `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + nicRequest + `,"config":[` + rdma(nicConfig) + `]}}}}`,
			want: `spec.spec.devices.config[0].opaque.parameters.vf: Forbidden: only SR-IOV virtual functions (DeviceClass rdma-vf.strata.sh) take a vf section; request "nic" asks for RDMA NICs`,
		},
		{
			name: "DeviceClass of RDMA NICs",
			path: DeviceConfigsPath, kind: classKind,
			bad:  class("rdma-nic.strata.sh", rdma(vfConfig)),
			good: class("rdma-vf.strata.sh", rdma(vfConfig)),
			want: `spec.config[0].opaque.parameters.vf: Forbidden: only SR-IOV virtual functions (DeviceClass rdma-vf.strata.sh) take a vf section; DeviceClass rdma-nic.strata.sh selects RDMA NICs`,
		},
		{
			name: "DeviceClass, RDMA rate not in whole megabits",
			path: DeviceConfigsPath, kind: classKind,
			bad:  class("rdma-vf.strata.sh", rdma(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"maxTxRate":"1500k"}}`)),
			good: class("rdma-vf.strata.sh", rdma(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NicConfig","vf":{"maxTxRate":"1500M"}}`)),
			want: `spec.config[0].opaque.parameters: vf.maxTxRate: Invalid value: "1500k": must be whole megabits per second`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := handle(t, tc.path, request(admissionv1.Create, tc.kind, tc.bad, ""))
			if bad.Allowed || !strings.Contains(message(bad), tc.want) {
				t.Errorf("with the mistake: allowed %v, message %q; want refused with %q", bad.Allowed, message(bad), tc.want)
			}
			if bad.Allowed || bad.Result.Code != http.StatusUnprocessableEntity || len(bad.Result.Details.Causes) == 0 {
				t.Errorf("with the mistake: result %+v, want 422 with causes", bad.Result)
			}
			good := handle(t, tc.path, request(admissionv1.Create, tc.kind, tc.good, ""))
			if !good.Allowed {
				t.Errorf("without the mistake: refused with %q", message(good))
			}
		})
	}
}

// Objects that carry no Strata input are allowed: pods without gang
// annotations, other drivers' configs, other operations.
func TestNotStrataInputIsAllowed(t *testing.T) {
	tests := []struct {
		name string
		path string
		req  admission.Request
	}{
		{"pod without annotations", PodsPath, request(admissionv1.Create, podKind, `{"metadata":{"name":"p","namespace":"ml"}}`, "")},
		{"pod with other annotations", PodsPath, request(admissionv1.Create, podKind, `{"metadata":{"name":"p","namespace":"ml","annotations":{"scheduling.strata.sh/other":"x","example.com/min-available":"two"}}}`, "")},
		{"other driver's config", DeviceConfigsPath, request(admissionv1.Create, claimKind,
			claim(migRequest, `{"opaque":{"driver":"gpu.example.com","parameters":{"sharing":"whatever"}}}`), "")},
		{"other driver's config on an RDMA NIC", DeviceConfigsPath, request(admissionv1.Create, claimKind,
			claim(nicRequest, `{"opaque":{"driver":"nic.example.com","parameters":{"vf":{"vlanId":5000}}}}`), "")},
		{"other driver's config in the RDMA NIC class", DeviceConfigsPath, request(admissionv1.Create, classKind,
			class("rdma-nic.strata.sh", `{"opaque":{"driver":"sriov.example.com","parameters":{"vf":{"vlan":5000}}}}`), "")},
		{"delete", PodsPath, request(admissionv1.Delete, podKind, "", `{"metadata":{"annotations":{"scheduling.strata.sh/min-available":"two"}}}`)},
		{"another version", DeviceConfigsPath, request(admissionv1.Create, metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1beta2", Kind: "ResourceClaim"}, claim(migRequest, opaque(`{}`)), "")},
	}
	for _, tc := range tests {
		if r := handle(t, tc.path, tc.req); !r.Allowed {
			t.Errorf("%s: refused with %q", tc.name, message(r))
		}
	}
}

// RDMA configs that are right are allowed: a vf section for virtual
// functions, none for NICs, and a vf section that names its request in a
// claim that also asks for a NIC.
func TestGoodRDMAConfigsAreAllowed(t *testing.T) {
	both := `[{"name":"nic","exactly":{"deviceClassName":"rdma-nic.strata.sh"}},{"name":"vf","exactly":{"deviceClassName":"rdma-vf.strata.sh"}}]`
	tests := []struct {
		name string
		kind metav1.GroupVersionKind
		obj  string
	}{
		{"VF config for a VF", claimKind, claim(vfRequest, rdma(vfConfig))},
		{"config without vf for a NIC", claimKind, claim(nicRequest, rdma(nicConfig))},
		{"VF config for the VF request only", claimKind, claim(both, `{"requests":["vf"],"opaque":{"driver":"rdma.strata.sh","parameters":`+vfConfig+`}}`)},
		{"VF config for the VF subrequest", claimKind, claim(netRequest, `{"requests":["net/vf"],"opaque":{"driver":"rdma.strata.sh","parameters":`+vfConfig+`}}`)},
		{"VF config in a template", templateKind, `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + vfRequest + `,"config":[` + rdma(vfConfig) + `]}}}}`},
		{"VF config in the VF class", classKind, class("rdma-vf.strata.sh", rdma(vfConfig))},
		{"config without vf in the NIC class", classKind, class("rdma-nic.strata.sh", rdma(nicConfig))},
		{"VF config in a class of one's own", classKind, class("rdma-vf-vlan100.example.com", rdma(vfConfig))},
	}
	for _, tc := range tests {
		if r := handle(t, DeviceConfigsPath, request(admissionv1.Create, tc.kind, tc.obj, "")); !r.Allowed {
			t.Errorf("%s: refused with %q", tc.name, message(r))
		}
	}
}

// Cambricon configs that are right are allowed, for whole cards and sMLUs
// alike, in claims, templates and DeviceClasses.
func TestGoodCambriconConfigsAreAllowed(t *testing.T) {
	tests := []struct {
		name string
		kind metav1.GroupVersionKind
		obj  string
	}{
		{"empty config for a whole card", claimKind, claim(mluRequest, cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig"}`))},
		{"cnmon Mount for a whole card", claimKind, claim(mluRequest, cambricon(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Mount"}`))},
		{"cnmon None for an sMLU", claimKind, claim(smluRequest, cambricon(mluConfig))},
		{"config in a template", templateKind, `{"metadata":{"name":"t","namespace":"ml"},"spec":{"spec":{"devices":{"requests":` + mluRequest + `,"config":[` + cambricon(mluConfig) + `]}}}}`},
		{"config in the sMLU class", classKind, class("cambricon-smlu.strata.sh", cambricon(mluConfig))},
	}
	for _, tc := range tests {
		if r := handle(t, DeviceConfigsPath, request(admissionv1.Create, tc.kind, tc.obj, "")); !r.Allowed {
			t.Errorf("%s: refused with %q", tc.name, message(r))
		}
	}
}

// A claim with configs of both drivers has the mistakes of each named.
func TestMistakesOfBothDriversAreNamed(t *testing.T) {
	requests := `[{"name":"mig","exactly":{"deviceClassName":"nvidia-mig.strata.sh"}},{"name":"nic","exactly":{"deviceClassName":"rdma-nic.strata.sh"}}]`
	obj := claim(requests, `{"requests":["mig"],"opaque":{"driver":"nvidia.strata.sh","parameters":`+mpsConfig+`}},`+
		`{"requests":["nic"],"opaque":{"driver":"rdma.strata.sh","parameters":`+vfConfig+`}}`)
	r := handle(t, DeviceConfigsPath, request(admissionv1.Create, claimKind, obj, ""))
	for _, want := range []string{
		`spec.devices.config[0].opaque.parameters.sharing: Forbidden: only GPUs take a sharing configuration; request "mig"`,
		`spec.devices.config[1].opaque.parameters.vf: Forbidden: only SR-IOV virtual functions (DeviceClass rdma-vf.strata.sh) take a vf section; request "nic"`,
	} {
		if !strings.Contains(message(r), want) {
			t.Errorf("message %q does not name %q", message(r), want)
		}
	}
	if r.Allowed || len(r.Result.Details.Causes) != 2 {
		t.Errorf("allowed %v, result %+v; want refused with 2 causes", r.Allowed, r.Result)
	}
}

// An update may keep a mistake the object had (relabelling an old pod,
// removing a finalizer) but not add one.
func TestUpdateKeepsOldMistakesOnly(t *testing.T) {
	old := `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/min-available":"two"}}}`
	relabelled := `{"metadata":{"name":"w-0","namespace":"ml","labels":{"a":"b"},"annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/min-available":"two"}}}`
	if r := handle(t, PodsPath, request(admissionv1.Update, podKind, relabelled, old)); !r.Allowed {
		t.Errorf("update that keeps the old mistake: refused with %q", message(r))
	}
	worse := `{"metadata":{"name":"w-0","namespace":"ml","annotations":{"gang.scheduling.koordinator.sh/name":"job","gang.scheduling.koordinator.sh/min-available":"two","gang.scheduling.koordinator.sh/mode":"Lenient"}}}`
	r := handle(t, PodsPath, request(admissionv1.Update, podKind, worse, old))
	if r.Allowed || !strings.Contains(message(r), "mode") || strings.Contains(message(r), "min-available") {
		t.Errorf("update that adds a mistake: allowed %v, message %q; want refused for mode alone", r.Allowed, message(r))
	}
	created := handle(t, PodsPath, request(admissionv1.Create, podKind, relabelled, ""))
	if created.Allowed {
		t.Error("create with the mistake allowed")
	}
}

// Every mistake of an object is named, not only the first.
func TestEveryMistakeIsNamed(t *testing.T) {
	pg := `{"metadata":{"name":"train","namespace":"ml","annotations":{
		"scheduling.strata.sh/match-policy":"all",
		"scheduling.strata.sh/network-topology-spec":"{\"gatherStrategy\":[{\"strategy\":\"MustGather\"},{\"layer\":\"SpineLayer\",\"strategy\":\"Gather\"}]}"}},
		"spec":{"minMember":0}}`
	r := handle(t, PodGroupsPath, request(admissionv1.Create, podGroupKind, pg, ""))
	for _, want := range []string{
		"spec.minMember: Invalid value: 0: must be at least 1",
		"metadata.annotations[scheduling.strata.sh/network-topology-spec]: gatherStrategy[0].layer: required",
		"metadata.annotations[scheduling.strata.sh/network-topology-spec]: gatherStrategy[1].strategy",
		`metadata.annotations[scheduling.strata.sh/match-policy]: "all" is not one of`,
	} {
		if !strings.Contains(message(r), want) {
			t.Errorf("message %q does not name %q", message(r), want)
		}
	}
	if n := len(r.Result.Details.Causes); n != 4 {
		t.Errorf("%d causes, want 4", n)
	}
}
