package app

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/strata-sh/strata/internal/vendortool"
)

func TestVendorToolFlags(t *testing.T) {
	o := NewOptions()
	if o.VendorToolTimeout != vendortool.DefaultTimeout {
		t.Errorf("default %s, want %s", o.VendorToolTimeout, vendortool.DefaultTimeout)
	}
	fs := flag.NewFlagSet("plugin", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--vendor-tool-timeout=90s", "--health-interval=2m"}); err != nil {
		t.Fatal(err)
	}
	if o.VendorToolTimeout != 90*time.Second {
		t.Errorf("--vendor-tool-timeout=90s gave %s", o.VendorToolTimeout)
	}
	if o.HealthInterval != 2*time.Minute {
		t.Errorf("--health-interval=2m gave %s", o.HealthInterval)
	}
	o.VendorToolTimeout, o.HealthInterval = 0, 0
	err := o.Validate()
	for _, want := range []string{"--vendor-tool-timeout must be positive", "--health-interval must be positive"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate 0: %v, want %q", err, want)
		}
	}
}

// The sMLU syntax flags reach the client that runs cnmon: a configured
// create template is what runs, and a template lacking a value is
// refused naming the flags.
func TestSMLUSyntaxFlags(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("plugin", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--smlu-create-args=dsmlu add -c {card} -q {vcore} -m {memoryMiB}"}); err != nil {
		t.Fatal(err)
	}
	s, err := o.smluSyntax()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Create(2, 30, 4096), " "); got != "dsmlu add -c 2 -q 30 -m 4096" {
		t.Errorf("create runs %q", got)
	}
	if got := strings.Join(s.Info(2), " "); got != "smlu -c 2 -info" {
		t.Errorf("info runs %q, want the default", got)
	}
	o.SMLUDestroyArgs = "smlu -c {card} -destroy"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--smlu-destroy-args") || !strings.Contains(err.Error(), "lack {id}") {
		t.Errorf("validate: %v", err)
	}
}
