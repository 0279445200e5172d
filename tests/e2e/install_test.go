package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/strata-sh/strata/deployments/chart"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/controlplane"
)

const twoH100Nodes = `
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: h100
  count: 2
  hardware: nvidia-dgx-h100
  mig: dynamic
`

// whoAmI is the user the API server sees behind client.
func whoAmI(t *testing.T, ctx context.Context, client kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	return r.Status.UserInfo
}

// may says whether client may do verb on resource (cluster-wide).
func may(t *testing.T, ctx context.Context, client kubernetes.Interface, verb, group, resource string) bool {
	t.Helper()
	r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject access review: %v", err)
	}
	return r.Status.Allowed
}

// TestChartInstallRunsComponentsUnderTheirIdentities: strata-sim installs
// the Helm chart rendered with Helm's SDK and runs every component as the
// service account the chart gives it, so every other end-to-end test
// runs under the chart's RBAC and policies. The chart's other values
// files are accepted by the API server too.
func TestChartInstallRunsComponentsUnderTheirIdentities(t *testing.T) {
	e := startCluster(t, twoH100Nodes)
	ns := chart.DefaultRelease.Namespace

	// The scheduler's kubeconfig acts as its service account, which may
	// bind pods but not read Secrets.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.sim.ControlPlane.Dir, "scheduler.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	sched := kubernetes.NewForConfigOrDie(cfg)
	if u := whoAmI(t, e.ctx, sched); u.Username != "system:serviceaccount:"+ns+":strata-scheduler" {
		t.Errorf("scheduler runs as %q", u.Username)
	}
	if !may(t, e.ctx, sched, "create", "", "pods/binding") || may(t, e.ctx, sched, "list", "", "secrets") {
		t.Errorf("scheduler: want pods/binding allowed and secrets denied")
	}

	// API Priority and Fairness puts the scheduler at workload-high, as
	// kube-scheduler, and the plugins at system, as the nodes' agents.
	levelOf := func(cfg *restclient.Config) string {
		t.Helper()
		hc, err := restclient.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(cfg.Host + "/api/v1/namespaces/default/pods?limit=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		uid := resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)
		levels, err := e.client.FlowcontrolV1().PriorityLevelConfigurations().List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range levels.Items {
			if string(l.UID) == uid {
				return l.Name
			}
		}
		return "(none: " + uid + ")"
	}
	if got := levelOf(cfg); got != "workload-high" {
		t.Errorf("scheduler requests at priority level %s, want workload-high", got)
	}
	if got := levelOf(controlplane.ServiceAccount(ns, "strata-nvidia-kubelet-plugin").OnNode("h100-0", "").Config(e.sim.ControlPlane.Config)); got != "system" {
		t.Errorf("plugin requests at priority level %s, want system", got)
	}

	// A plugin acts as its service account with its node's name, as a
	// token bound to its pod does.
	plugin, err := e.sim.PluginClient(nvidia.DriverName, "h100-0")
	if err != nil {
		t.Fatal(err)
	}
	u := whoAmI(t, e.ctx, plugin)
	if u.Username != "system:serviceaccount:"+ns+":strata-nvidia-kubelet-plugin" || len(u.Extra[controlplane.ExtraNodeName]) != 1 || u.Extra[controlplane.ExtraNodeName][0] != "h100-0" {
		t.Errorf("plugin runs as %q with %v", u.Username, u.Extra)
	}
	if may(t, e.ctx, plugin, "list", "", "secrets") || may(t, e.ctx, plugin, "update", "resource.k8s.io", "resourceclaims") {
		t.Errorf("plugin may read secrets or change claims")
	}

	// strata-controller's certificate rotator filled the chart's Secret
	// under the controller's own RBAC (sim.Start waited for the webhook).
	secret, err := e.client.CoreV1().Secrets(ns).Get(e.ctx, "strata-controller-webhook-cert", metav1.GetOptions{})
	if err != nil || len(secret.Data["tls.crt"]) == 0 {
		t.Errorf("webhook certificate secret: %v, %d bytes", err, len(secret.Data["tls.crt"]))
	}

	// Every values file of the chart renders to objects the API server
	// accepts (server-side dry run, strict fields).
	files, err := filepath.Glob("../../deployments/helm/strata/ci/*-values.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("values files: %v", err)
	}
	applier, err := apply.New(e.sim.ControlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The default values' Deployments and DaemonSets, which strata-sim
	// runs in process rather than applying, are checked here too.
	for _, f := range append([]string{"defaults"}, files...) {
		values := map[string]any{}
		if f != "defaults" {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if values, err = chart.ParseValues(raw); err != nil {
				t.Fatal(err)
			}
		}
		rel := chart.Release{Name: "strata-" + strings.TrimSuffix(filepath.Base(f), "-values.yaml"), Namespace: ns}
		r, err := chart.Render(rel, values)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var objs []apply.Object
		for _, m := range r.Templates {
			got, err := apply.Decode(m.Content, filepath.Base(f)+" "+m.Name)
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, got...)
		}
		if err := applier.DryRun(e.ctx, objs); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
	}
}

// TestPluginMayOnlyChangeItsOwnNodesSlices: the chart's
// ValidatingAdmissionPolicy denies a node's plugin any change to another
// node's ResourceSlices, with the policy's message, and lets it change
// its own.
func TestPluginMayOnlyChangeItsOwnNodesSlices(t *testing.T) {
	e := startCluster(t, twoH100Nodes)
	plugin, err := e.sim.PluginClient(nvidia.DriverName, "h100-0")
	if err != nil {
		t.Fatal(err)
	}
	slices, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var own, other string
	for _, s := range slices.Items {
		switch *s.Spec.NodeName {
		case "h100-0":
			own = s.Name
		case "h100-1":
			other = s.Name
		}
	}
	if own == "" || other == "" {
		t.Fatalf("slices of both nodes: own %q, other %q", own, other)
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}

	// Its own node: allowed (the proof that the policy lets the plugin
	// work, before asserting what it refuses).
	s, err := plugin.ResourceV1().ResourceSlices().Get(e.ctx, own, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels = map[string]string{"touched": "yes"}
	if _, err := plugin.ResourceV1().ResourceSlices().Update(e.ctx, s, dryRun); err != nil {
		t.Fatalf("update of its own node's slice: %v", err)
	}

	const want = "the Strata kubelet plugin on node h100-0 may not change ResourceSlices of node h100-1"
	s, err = plugin.ResourceV1().ResourceSlices().Get(e.ctx, other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels = map[string]string{"touched": "yes"}
	_, err = plugin.ResourceV1().ResourceSlices().Update(e.ctx, s, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("update of another node's slice: %v, want denial %q", err, want)
	}
	err = plugin.ResourceV1().ResourceSlices().Delete(e.ctx, other, metav1.DeleteOptions{})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("delete of another node's slice: %v, want denial %q", err, want)
	}
	s.ObjectMeta = metav1.ObjectMeta{GenerateName: "stolen-"}
	_, err = plugin.ResourceV1().ResourceSlices().Create(e.ctx, s, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("create of a slice for another node: %v, want denial %q", err, want)
	}
	if got, err := e.client.ResourceV1().ResourceSlices().Get(e.ctx, other, metav1.GetOptions{}); err != nil || got.Labels["touched"] != "" {
		t.Errorf("the other node's slice changed: %v %v", err, got.Labels)
	}
}

// badInput is one class of bad input: the manifest with the mistake is
// refused when applied, with the field named, and the same manifest
// without it is accepted.
type badInput struct {
	name      string
	bad, good string
	want      []string
}

const gangPod = `
apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations:
    %s
spec:
  schedulerName: strata-scheduler
  containers:
  - name: c
    image: busybox
`

func podWith(name, annotations string) string {
	return strings.NewReplacer("%s\n  annotations:\n    %s", name+"\n  annotations:\n    "+annotations).Replace(gangPod)
}

const sharedClaimConfig = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: %NAME%
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: %CLASS%
    config:
    - opaque:
        driver: nvidia.strata.sh
        parameters:
          apiVersion: config.strata.sh/v1alpha1
          kind: GpuConfig
          sharing: %SHARING%
`

func claimWith(name, class, sharing string) string {
	return strings.NewReplacer("%NAME%", name, "%CLASS%", class, "%SHARING%", sharing).Replace(sharedClaimConfig)
}

func badInputs() []badInput {
	return []badInput{
		{name: "strata-pod-annotation",
			bad:  podWith("spec-bad", `scheduling.strata.sh/network-topology-spec: '{"gatherStrategy":[{"layer":"BlockLayer","strategy":"Sometimes"}]}'`),
			good: podWith("spec-good", `scheduling.strata.sh/network-topology-spec: '{"gatherStrategy":[{"layer":"BlockLayer","strategy":"PreferGather"}]}'`),
			want: []string{"metadata.annotations[scheduling.strata.sh/network-topology-spec]", "strategy"}},
		{name: "koordinator-pod-annotation",
			bad:  podWith("koord-bad", `gang.scheduling.koordinator.sh/min-available: "two"`),
			good: podWith("koord-good", `gang.scheduling.koordinator.sh/min-available: "2"`),
			want: []string{"metadata.annotations[gang.scheduling.koordinator.sh/min-available]", `"two"`}},
		{name: "podgroup-spec",
			bad:  "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: pg-bad\nspec:\n  minMember: 0\n",
			good: "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: pg-good\nspec:\n  minMember: 1\n",
			want: []string{"spec.minMember"}},
		{name: "podgroup-annotation",
			bad:  "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: pgann-bad\n  annotations:\n    scheduling.strata.sh/total-number: \"2\"\nspec:\n  minMember: 4\n",
			good: "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: pgann-good\n  annotations:\n    scheduling.strata.sh/total-number: \"4\"\nspec:\n  minMember: 4\n",
			want: []string{"metadata.annotations[scheduling.strata.sh/total-number]"}},
		{name: "cluster-network-topology",
			bad:  "apiVersion: topology.strata.sh/v1alpha1\nkind: ClusterNetworkTopology\nmetadata:\n  name: cnt-bad\nspec:\n  networkTopologySpec:\n  - topologyLayer: SpineLayer\n    labelKey: [network.example.com/spine]\n  - topologyLayer: BlockLayer\n    parentTopologyLayer: SpineLayer\n    labelKey: ['not a key!']\n",
			good: "apiVersion: topology.strata.sh/v1alpha1\nkind: ClusterNetworkTopology\nmetadata:\n  name: cnt-good\nspec:\n  networkTopologySpec:\n  - topologyLayer: SpineLayer\n    labelKey: [network.example.com/spine]\n  - topologyLayer: BlockLayer\n    parentTopologyLayer: SpineLayer\n    labelKey: [network.example.com/block]\n",
			want: []string{"spec.networkTopologySpec[1].labelKey[0]"}},
		{name: "claim-unknown-field",
			bad:  claimWith("unknown-bad", "nvidia-shared.strata.sh", `{strategy: HAMiCore, hamiCore: {coreLimt: 20}}`),
			good: claimWith("unknown-good", "nvidia-shared.strata.sh", `{strategy: HAMiCore, hamiCore: {coreLimit: 20}}`),
			want: []string{"spec.devices.config[0].opaque.parameters", `unknown field "sharing.hamiCore.coreLimt"`}},
		{name: "claim-limit-out-of-range",
			bad:  claimWith("range-bad", "nvidia-shared.strata.sh", `{strategy: MPS, mps: {activeThreadPercentage: 150}}`),
			good: claimWith("range-good", "nvidia-shared.strata.sh", `{strategy: MPS, mps: {activeThreadPercentage: 50}}`),
			want: []string{"spec.devices.config[0].opaque.parameters", "sharing.mps.activeThreadPercentage"}},
		{name: "claim-sharing-on-mig",
			bad:  claimWith("mig-bad", "nvidia-mig.strata.sh", `{strategy: MPS}`),
			good: claimWith("mig-good", "nvidia-shared.strata.sh", `{strategy: MPS}`),
			want: []string{"spec.devices.config[0]", "MIG"}},
		{name: "template-unknown-field",
			bad:  "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: tmpl-bad\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly: {deviceClassName: nvidia-shared.strata.sh}\n      config:\n      - opaque:\n          driver: nvidia.strata.sh\n          parameters: {apiVersion: config.strata.sh/v1alpha1, kind: GpuConfig, sharing: {strategy: TimeSlicing, timeSlicing: {interval: Forever}}}\n",
			good: "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: tmpl-good\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly: {deviceClassName: nvidia-shared.strata.sh}\n      config:\n      - opaque:\n          driver: nvidia.strata.sh\n          parameters: {apiVersion: config.strata.sh/v1alpha1, kind: GpuConfig, sharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}}\n",
			want: []string{"spec.spec.devices.config[0].opaque.parameters", "sharing.timeSlicing.interval"}},
		{name: "deviceclass-config",
			bad:  "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: mps-bad.example.com\nspec:\n  selectors:\n  - cel: {expression: 'device.driver == \"nvidia.strata.sh\"'}\n  config:\n  - opaque:\n      driver: nvidia.strata.sh\n      parameters: {apiVersion: config.strata.sh/v1alpha1, kind: GpuConfig, sharing: {strategy: MPS, mps: {pinnedMemoryLimit: 0}}}\n",
			good: "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: mps-good.example.com\nspec:\n  selectors:\n  - cel: {expression: 'device.driver == \"nvidia.strata.sh\"'}\n  config:\n  - opaque:\n      driver: nvidia.strata.sh\n      parameters: {apiVersion: config.strata.sh/v1alpha1, kind: GpuConfig, sharing: {strategy: MPS, mps: {pinnedMemoryLimit: 10Gi}}}\n",
			want: []string{"spec.config[0].opaque.parameters", "sharing.mps.pinnedMemoryLimit"}},
	}
}

// applyYAML applies one manifest in the default namespace.
func (e *env) applyYAML(name, manifest string) error {
	objs, err := apply.Decode([]byte(manifest), name)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetNamespace() == "" && o.GetKind() != "DeviceClass" && o.GetKind() != "ClusterNetworkTopology" {
			o.SetNamespace("default")
		}
	}
	return e.sim.Apply(e.ctx, objs)
}

// TestAdmissionRefusesBadInput: each class of bad Strata input is refused
// when it is applied, with the field named; the same manifest without the
// mistake is accepted.
func TestAdmissionRefusesBadInput(t *testing.T) {
	e := startCluster(t, oneH100MIGNode)
	for _, c := range badInputs() {
		t.Run(c.name, func(t *testing.T) {
			if err := e.applyYAML(c.name+" (fixed)", c.good); err != nil {
				t.Fatalf("the manifest without the mistake is refused: %v", err)
			}
			err := e.applyYAML(c.name, c.bad)
			if err == nil {
				t.Fatalf("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestWebhookOutageDoesNotBlockPlainPods: with strata-controller down,
// pods without Strata input are still created (the webhook never sees
// them), and the CEL policies still refuse the annotation mistakes they
// can express.
func TestWebhookOutageDoesNotBlockPlainPods(t *testing.T) {
	e := startCluster(t, oneH100MIGNode)
	e.sim.StopController()
	// Proof that the webhook is down: a PodGroup, which always goes to
	// it, cannot be created.
	err := e.applyYAML("podgroup", "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata:\n  name: pg\nspec:\n  minMember: 1\n")
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("PodGroup with the webhook down: %v, want a failed webhook call", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if _, err := e.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("plain pod with the webhook down: %v", err)
	}
	err = e.applyYAML("koordinator pod", podWith("koord", `gang.scheduling.koordinator.sh/mode: "Relaxed"`))
	if err == nil || !strings.Contains(err.Error(), "metadata.annotations[gang.scheduling.koordinator.sh/mode]") {
		t.Errorf("bad mode annotation with the webhook down: %v, want the policy's refusal", err)
	}
}
