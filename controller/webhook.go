package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/strata-sh/strata/controller/admission"
)

// Names cert-controller puts in the CA it makes.
const (
	caName         = "strata"
	caOrganization = "strata"
)

// newWebhookServer returns the webhook server with every handler of
// package admission registered. It starts serving once ready is closed
// (the certificates are in CertDir); with Port 0 it is disabled and
// serves nothing.
func newWebhookServer(o WebhookOptions, ready <-chan struct{}) webhook.Server {
	if o.Port == 0 {
		return webhook.NewServer(webhook.Options{Port: -1})
	}
	srv := webhook.NewServer(webhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir})
	admission.Register(srv)
	return &gatedServer{Server: srv, ready: ready}
}

// gatedServer is a webhook server that waits for its certificates:
// controller-runtime's server fails at once when tls.crt is not there
// yet, and cert-controller writes it only after the manager started.
type gatedServer struct {
	webhook.Server
	ready <-chan struct{}
}

// Start serves once the certificates are ready.
func (s *gatedServer) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.ready:
	}
	return s.Server.Start(ctx)
}

// StartedChecker fails until the certificates are ready, then until
// the server answers TLS.
func (s *gatedServer) StartedChecker() healthz.Checker {
	started := s.Server.StartedChecker()
	return func(req *http.Request) error {
		select {
		case <-s.ready:
			return started(req)
		default:
			return errors.New("the webhook's certificates are not ready yet")
		}
	}
}

// NeedLeaderElection is false: every replica serves the webhook.
func (s *gatedServer) NeedLeaderElection() bool { return false }

// webhookCache restricts what the manager's cache may watch of the
// objects certificate management touches: the one Secret, in the
// controller's namespace, and the one ValidatingWebhookConfiguration.
// With no webhook it is empty, so nothing about Secrets is configured at
// all. (cert-controller reads through a cache of its own: every Secret of
// the namespace and every ValidatingWebhookConfiguration.)
func webhookCache(o WebhookOptions) cache.Options {
	if o.Port == 0 || !o.ManageCertificates {
		return cache.Options{}
	}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Secret{}: {
			Namespaces: map[string]cache.Config{o.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", o.SecretName),
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: fields.OneTermEqualSelector("metadata.name", o.ConfigName)},
	}
	if o.RouteToScheduler != "" {
		byObject[&admissionregistrationv1.MutatingWebhookConfiguration{}] = cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", o.RoutingConfigName)}
	}
	return cache.Options{ByObject: byObject}
}

// setupWebhook adds the webhook server to mgr and a readiness check that
// fails until the server serves with its certificates. When it manages
// them, cert-controller's rotator issues them into the Secret and the CA
// into the ValidatingWebhookConfiguration, certWriter copies them into
// CertDir, and ready is closed once both are done; otherwise they are in
// CertDir already and ready is closed at once.
func setupWebhook(mgr ctrl.Manager, o WebhookOptions, ready chan struct{}) error {
	if o.Port == 0 {
		return nil
	}
	srv := mgr.GetWebhookServer() // adds it to the manager
	if o.RouteToScheduler != "" {
		(&admission.Router{Reader: mgr.GetAPIReader(), Scheduler: o.RouteToScheduler}).Register(srv)
	}
	if o.ManageCertificates {
		webhooks := []rotator.WebhookInfo{{Name: o.ConfigName, Type: rotator.Validating}}
		if o.RouteToScheduler != "" {
			webhooks = append(webhooks, rotator.WebhookInfo{Name: o.RoutingConfigName, Type: rotator.Mutating})
		}
		err := rotator.AddRotator(mgr, &rotator.CertRotator{
			ControllerName: rotatorName(),
			SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
			CertDir:        o.CertDir,
			CAName:         caName,
			CAOrganization: caOrganization,
			DNSName:        fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace),
			IsReady:        ready,
			Webhooks:       webhooks,
			// Every replica serves the webhook, so every replica needs
			// the certificates, leader or not.
			RequireLeaderElection: false,
		})
		if err != nil {
			return fmt.Errorf("set up webhook certificates: %w", err)
		}
		w := &certWriter{Reader: mgr.GetClient(), secret: types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName}, dir: o.CertDir}
		if err := w.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up webhook certificates: %w", err)
		}
	} else {
		close(ready)
	}
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return fmt.Errorf("add webhook readiness check: %w", err)
	}
	return nil
}

// rotatorSeq counts the certificate rotators of this process.
var rotatorSeq atomic.Int64

// rotatorName names a certificate rotator's controller. controller-runtime
// wants controller names unique in a process, and the library builds its
// controller outside the manager's SkipNameValidation, so a second manager
// in the same process (tests, strata-sim restarting the controller) needs
// a name of its own.
func rotatorName() string {
	if n := rotatorSeq.Add(1); n > 1 {
		return fmt.Sprintf("strata-cert-rotator-%d", n)
	}
	return "strata-cert-rotator"
}
