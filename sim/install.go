package sim

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/strata-sh/strata/deployments/chart"
	"github.com/strata-sh/strata/sim/apply"
	"github.com/strata-sh/strata/sim/controlplane"
)

// installation is what the Helm chart installs, split the way the
// simulator uses it: the cluster objects it applies (CRDs, RBAC,
// policies, webhook configuration, DeviceClasses, the scheduler's
// ConfigMap), and the components it runs in process in place of the
// chart's Deployments and DaemonSets, each with the service account and
// the flags the chart gives it.
type installation struct {
	release chart.Release
	objects []apply.Object

	schedulerConfig []byte
	scheduler       *controlplane.Identity
	controller      *controlplane.Identity
	// webhook is the controller's webhook settings from its flags; nil
	// when the chart runs no webhook.
	webhook *webhookFlags
	// plugins are the kubelet plugins' identities by driver name.
	plugins map[string]controlplane.Identity
}

// webhookFlags are the chart's strata-controller webhook flags.
type webhookFlags struct {
	namespace, service, secret, config string
	// routeTo and routingConfig are the pod routing webhook's.
	routeTo, routingConfig string
}

// newInstallation renders the chart for release with values.
func newInstallation(release chart.Release, values map[string]any, kubeScheduler bool) (*installation, error) {
	// Unless the cluster runs kube-scheduler too, strata-scheduler also
	// serves pods that name no scheduler, unless the values say otherwise.
	if !kubeScheduler {
		values = loader.MergeMaps(map[string]any{"scheduler": map[string]any{"replaceDefaultScheduler": true}}, values)
	}
	r, err := chart.Render(release, values)
	if err != nil {
		return nil, err
	}
	in := &installation{release: release, plugins: map[string]controlplane.Identity{}}
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(release.Namespace)
	in.objects = append(in.objects, apply.Object{Unstructured: ns, Source: "helm install --create-namespace", Doc: 1})
	for _, m := range r.All() {
		objs, err := apply.Decode(m.Content, "chart "+m.Name)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			switch o.GetKind() {
			case "Deployment", "DaemonSet":
				if err := in.component(o); err != nil {
					return nil, fmt.Errorf("%s: %w", o.Where(), err)
				}
				continue
			case "ConfigMap":
				if o.GetLabels()["app.kubernetes.io/component"] == "scheduler" {
					cfg, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
					in.schedulerConfig = []byte(cfg)
				}
			}
			in.objects = append(in.objects, o)
		}
	}
	return in, nil
}

// component records the identity and flags of a Deployment or DaemonSet
// that the simulator runs in process.
func (in *installation) component(o apply.Object) error {
	var spec appsv1.DeploymentSpec // the pod template is all that is read
	tmpl, found, err := unstructured.NestedMap(o.Object, "spec", "template")
	if err != nil || !found {
		return fmt.Errorf("no pod template")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"template": tmpl}, &spec); err != nil {
		return err
	}
	pod := spec.Template.Spec
	if pod.ServiceAccountName == "" || len(pod.Containers) == 0 {
		return fmt.Errorf("no service account or container")
	}
	id := controlplane.ServiceAccount(o.GetNamespace(), pod.ServiceAccountName)
	flags := map[string]string{}
	for _, a := range pod.Containers[0].Args {
		if k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok {
			flags[k] = v
		}
	}
	component := o.GetLabels()["app.kubernetes.io/component"]
	switch {
	case component == "scheduler":
		in.scheduler = &id
	case component == "controller":
		in.controller = &id
		if port, _ := strconv.Atoi(flags["webhook-port"]); port > 0 {
			in.webhook = &webhookFlags{namespace: flags["namespace"], service: flags["webhook-service"], secret: flags["webhook-secret"], config: flags["webhook-config"],
				routeTo: flags["route-pods-to-scheduler"], routingConfig: flags["routing-webhook-config"]}
		}
	case strings.HasSuffix(component, "-kubelet-plugin"):
		dir := flags["plugin-data-dir"]
		if dir == "" {
			return fmt.Errorf("kubelet plugin without --plugin-data-dir")
		}
		// The plugin's data directory is named by its driver.
		in.plugins[path.Base(dir)] = id
	default:
		return fmt.Errorf("unknown component %q", component)
	}
	return nil
}

// webhookReadyTimeout bounds the wait for strata-controller's webhook.
const webhookReadyTimeout = 2 * time.Minute

// waitWebhook returns once the API server reaches strata-controller's
// webhook with a certificate it trusts: a dry-run PodGroup, which every
// PodGroup webhook call sees, is admitted.
func waitWebhook(ctx context.Context, dyn dynamic.Interface, namespace string) error {
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
		"kind":       "PodGroup",
		"metadata":   map[string]any{"name": "strata-sim-webhook-probe"},
		"spec":       map[string]any{"minMember": int64(1)},
	}}
	gvr := schema.GroupVersionResource{Group: "scheduling.sigs.k8s.io", Version: "v1alpha1", Resource: "podgroups"}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, webhookReadyTimeout, true, func(ctx context.Context) (bool, error) {
		_, last = dyn.Resource(gvr).Namespace(namespace).Create(ctx, pg, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("strata-controller's webhook is not reachable: %v: %w", last, err)
	}
	return nil
}
