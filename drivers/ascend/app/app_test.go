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
