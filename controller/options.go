package controller

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of the flags.
const (
	// DefaultLeaderElectionNamespace holds the leader lock when neither
	// --leader-election-namespace nor POD_NAMESPACE says where.
	DefaultLeaderElectionNamespace = "kube-system"
	DefaultWebhookPort             = 9443
	DefaultWebhookCertDir          = "/tmp/k8s-webhook-server/serving-certs"
	DefaultWebhookService          = "strata-controller-webhook"
	DefaultWebhookSecret           = "strata-controller-webhook-cert"
	DefaultWebhookConfig           = "strata-validation"
	DefaultRoutingConfig           = "strata-routing"
)

// Options of the controller manager. The zero value runs the controllers
// alone: no webhook server, no leader election.
type Options struct {
	// LeaderElection runs the controller active/standby. The webhook
	// is served by every replica.
	LeaderElection bool
	// LeaderElectionNamespace holds the leader lock; kube-system when
	// empty.
	LeaderElectionNamespace string
	// MetricsAddress serves metrics; "0" disables.
	MetricsAddress string
	// HealthAddress serves /healthz and /readyz; "0" disables.
	HealthAddress string
	// Webhook configures the validating webhook (package
	// controller/admission).
	Webhook WebhookOptions
}

// WebhookOptions configure the validating webhook server.
type WebhookOptions struct {
	// Port serves the webhook over TLS; 0 means no webhook server.
	Port int
	// Host is the address to listen on; all addresses when empty.
	Host string
	// CertDir holds tls.crt and tls.key. With ManageCertificates they are
	// the Secret SecretName mounted there.
	CertDir string
	// ManageCertificates has cert-controller keep a CA and a serving
	// certificate in the Secret SecretName of Namespace, and the CA in
	// the ValidatingWebhookConfiguration ConfigName. Without it the
	// certificates are someone else's (cert-manager, a test).
	ManageCertificates bool
	// Namespace is strata-controller's own: the Secret's and the
	// Service's.
	Namespace string
	// ServiceName is the Service in front of the webhook; the serving
	// certificate is for <ServiceName>.<Namespace>.svc.
	ServiceName string
	// SecretName is the Secret that holds the certificates.
	SecretName string
	// ConfigName is the ValidatingWebhookConfiguration to give the CA.
	ConfigName string
	// RouteToScheduler, when set, serves the pod routing webhook
	// (admission.Router): pods that may get Strata's devices are given
	// this scheduler, strata-scheduler's name.
	RouteToScheduler string
	// RoutingConfigName is the MutatingWebhookConfiguration of the pod
	// routing webhook, given the CA when certificates are managed.
	RoutingConfigName string
}

// NewOptions returns the defaults of the command line: leader election
// on, metrics on :8080, health on :8081, the webhook on 9443 with
// certificates managed, namespaces from POD_NAMESPACE.
func NewOptions() Options {
	ns := os.Getenv("POD_NAMESPACE")
	leaderNS := ns
	if leaderNS == "" {
		leaderNS = DefaultLeaderElectionNamespace
	}
	return Options{
		LeaderElection:          true,
		LeaderElectionNamespace: leaderNS,
		MetricsAddress:          ":8080",
		HealthAddress:           ":8081",
		Webhook: WebhookOptions{
			Port:               DefaultWebhookPort,
			CertDir:            DefaultWebhookCertDir,
			ManageCertificates: true,
			Namespace:          ns,
			ServiceName:        DefaultWebhookService,
			SecretName:         DefaultWebhookSecret,
			ConfigName:         DefaultWebhookConfig,
			RoutingConfigName:  DefaultRoutingConfig,
		},
	}
}

// AddFlags binds the options to flags of fs, with their current values
// as defaults (call it on NewOptions()).
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "run active/standby with leader election (every replica serves the webhook)")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "namespace of the leader lock (default $POD_NAMESPACE, else kube-system)")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "metrics address; 0 disables")
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, "health probe address (/healthz, /readyz); 0 disables")
	fs.IntVar(&o.Webhook.Port, "webhook-port", o.Webhook.Port, "port of the validating webhook server; 0 disables it")
	fs.StringVar(&o.Webhook.Host, "webhook-host", o.Webhook.Host, "address the webhook server listens on; all when empty")
	fs.StringVar(&o.Webhook.CertDir, "webhook-cert-dir", o.Webhook.CertDir, "directory of the webhook's tls.crt and tls.key")
	fs.BoolVar(&o.Webhook.ManageCertificates, "manage-webhook-certs", o.Webhook.ManageCertificates, "generate and rotate the webhook's certificates into --webhook-secret and inject the CA into --webhook-config (cert-controller)")
	fs.StringVar(&o.Webhook.ServiceName, "webhook-service", o.Webhook.ServiceName, "Service of the webhook; the certificate is for <service>.<namespace>.svc")
	fs.StringVar(&o.Webhook.SecretName, "webhook-secret", o.Webhook.SecretName, "Secret in --namespace that holds the webhook's certificates")
	fs.StringVar(&o.Webhook.ConfigName, "webhook-config", o.Webhook.ConfigName, "ValidatingWebhookConfiguration that gets the CA")
	fs.StringVar(&o.Webhook.RouteToScheduler, "route-pods-to-scheduler", o.Webhook.RouteToScheduler, "serve the pod routing webhook: pods that may get devices of Strata's drivers are given this scheduler (strata-scheduler's name); empty serves none")
	fs.StringVar(&o.Webhook.RoutingConfigName, "routing-webhook-config", o.Webhook.RoutingConfigName, "MutatingWebhookConfiguration of the pod routing webhook, which gets the CA")
	fs.StringVar(&o.Webhook.Namespace, "namespace", o.Webhook.Namespace, "strata-controller's namespace, of the webhook's Service and Secret (default $POD_NAMESPACE)")
}

// Validate checks the options; each error names the flag at fault.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flagName, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flagName, fmt.Sprintf(format, args...)))
	}
	if ns := o.LeaderElectionNamespace; ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			bad("leader-election-namespace", "%q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
		}
	}
	for _, a := range []struct{ flag, addr string }{{"metrics-address", o.MetricsAddress}, {"health-address", o.HealthAddress}} {
		if a.addr == "" || a.addr == "0" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			bad(a.flag, "%q is not host:port or 0: %v", a.addr, err)
		}
	}
	w := o.Webhook
	if w.Port < 0 || w.Port > 65535 {
		bad("webhook-port", "%d is not a port (0 disables the webhook server)", w.Port)
	}
	if w.Port > 0 {
		if w.CertDir == "" {
			bad("webhook-cert-dir", "required to serve the webhook")
		}
		if w.ManageCertificates {
			if w.Namespace == "" {
				bad("namespace", "required to manage the webhook's certificates (or set POD_NAMESPACE)")
			} else if msgs := validation.IsDNS1123Label(w.Namespace); len(msgs) > 0 {
				bad("namespace", "%q is not a namespace name: %s", w.Namespace, strings.Join(msgs, "; "))
			}
			for _, n := range []struct {
				flag, name string
				check      func(string) []string
			}{
				{"webhook-service", w.ServiceName, validation.IsDNS1035Label},
				{"webhook-secret", w.SecretName, validation.IsDNS1123Subdomain},
				{"webhook-config", w.ConfigName, validation.IsDNS1123Subdomain},
			} {
				if n.name == "" {
					bad(n.flag, "required to manage the webhook's certificates")
				} else if msgs := n.check(n.name); len(msgs) > 0 {
					bad(n.flag, "%q is not a valid name: %s", n.name, strings.Join(msgs, "; "))
				}
			}
		}
	}
	if w.RouteToScheduler != "" {
		if msgs := validation.IsDNS1123Subdomain(w.RouteToScheduler); len(msgs) > 0 {
			bad("route-pods-to-scheduler", "%q is not a scheduler name: %s", w.RouteToScheduler, strings.Join(msgs, "; "))
		}
		if w.Port > 0 && w.ManageCertificates {
			if w.RoutingConfigName == "" {
				bad("routing-webhook-config", "required to manage the routing webhook's certificates")
			} else if msgs := validation.IsDNS1123Subdomain(w.RoutingConfigName); len(msgs) > 0 {
				bad("routing-webhook-config", "%q is not a valid name: %s", w.RoutingConfigName, strings.Join(msgs, "; "))
			}
		}
	}
	return errors.Join(errs...)
}
