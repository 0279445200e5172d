package controller

import (
	"flag"
	"strings"
	"testing"
)

func TestNewOptionsAndFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "strata-system")
	o := NewOptions()
	fs := flag.NewFlagSet("strata-controller", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--webhook-port=0", "--leader-elect=false"}); err != nil {
		t.Fatal(err)
	}
	if o.LeaderElectionNamespace != "strata-system" || o.Webhook.Namespace != "strata-system" || o.Webhook.Port != 0 || o.LeaderElection {
		t.Errorf("options %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}

	t.Setenv("POD_NAMESPACE", "")
	if o := NewOptions(); o.LeaderElectionNamespace != DefaultLeaderElectionNamespace || o.Webhook.Port != DefaultWebhookPort || !o.Webhook.ManageCertificates {
		t.Errorf("defaults without POD_NAMESPACE: %+v", o)
	}
	if err := (&Options{}).Validate(); err != nil {
		t.Errorf("zero options (no webhook, no leader election): %v", err)
	}
}

// Each mistake names its flag.
func TestValidateNamesTheFlag(t *testing.T) {
	tests := map[string]struct {
		change func(*Options)
		want   string
	}{
		"port":              {func(o *Options) { o.Webhook.Port = 70000 }, "--webhook-port: 70000 is not a port"},
		"namespace missing": {func(o *Options) { o.Webhook.Namespace = "" }, "--namespace: required to manage the webhook's certificates"},
		"cert dir":          {func(o *Options) { o.Webhook.CertDir = "" }, "--webhook-cert-dir: required"},
		"service":           {func(o *Options) { o.Webhook.ServiceName = "Strata_Webhook" }, `--webhook-service: "Strata_Webhook" is not a valid name`},
		"secret":            {func(o *Options) { o.Webhook.SecretName = "" }, "--webhook-secret: required"},
		"config":            {func(o *Options) { o.Webhook.ConfigName = "-x" }, `--webhook-config: "-x" is not a valid name`},
		"leader namespace":  {func(o *Options) { o.LeaderElectionNamespace = "Kube System" }, "--leader-election-namespace"},
		"metrics address":   {func(o *Options) { o.MetricsAddress = "8080" }, "--metrics-address"},
	}
	for name, tc := range tests {
		o := NewOptions()
		o.Webhook.Namespace = "strata-system"
		tc.change(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	// Without certificate management the names are not needed.
	o := NewOptions()
	o.Webhook.ManageCertificates, o.Webhook.Namespace, o.Webhook.SecretName = false, "", ""
	if err := o.Validate(); err != nil {
		t.Errorf("webhook with certificates of its own: %v", err)
	}
}
