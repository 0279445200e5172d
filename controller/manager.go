// Package controller is strata-controller: it keeps the status of
// ClusterNetworkTopology (the domains of every layer and the nodes that
// cannot be placed) and of PodGroups (member counts and phase), and
// serves the validating webhook of package controller/admission.
package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	schedulingv1alpha1 "github.com/strata-sh/strata/api/scheduling/v1alpha1"
	topologyv1alpha1 "github.com/strata-sh/strata/api/topology/v1alpha1"
)

// Scheme has the types the controller reads.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, schedulingv1alpha1.AddToScheme, topologyv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run builds the manager and runs it until ctx ends.
func Run(ctx context.Context, restConfig *restclient.Config, o Options) error {
	mgr, err := NewManager(restConfig, o)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// NewManager builds the manager with every Strata controller and, when
// o.Webhook.Port is set, the validating webhook.
func NewManager(restConfig *restclient.Config, o Options) (ctrl.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ctrl.SetLogger(klog.Background())
	// Strata's types have no protobuf encoding; the controller speaks JSON.
	restConfig = restclient.CopyConfig(restConfig)
	restConfig.ContentType, restConfig.AcceptContentTypes = "application/json", "application/json"
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	leaderNS := o.LeaderElectionNamespace
	if leaderNS == "" {
		leaderNS = DefaultLeaderElectionNamespace
	}
	certsReady := make(chan struct{})
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   webhookCache(o.Webhook),
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "strata-controller",
		LeaderElectionNamespace: leaderNS,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddress},
		HealthProbeBindAddress:  o.HealthAddress,
		WebhookServer:           newWebhookServer(o.Webhook, certsReady),
		// Tests and strata-sim run several managers in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("create controller manager: %w", err)
	}
	if err := (&TopologyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&PodGroupReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := setupWebhook(mgr, o.Webhook, certsReady); err != nil {
		return nil, err
	}
	// controller-runtime serves /healthz and /readyz only once a check
	// is registered; without these the kubelet's probes get 404s.
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
