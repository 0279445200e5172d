package app

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/strata-sh/strata/drivers/vendortool"
)

func TestVendorToolTimeoutFlag(t *testing.T) {
	o := NewOptions()
	if o.VendorToolTimeout != vendortool.DefaultTimeout {
		t.Errorf("default %s, want %s", o.VendorToolTimeout, vendortool.DefaultTimeout)
	}
	fs := flag.NewFlagSet("plugin", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--vendor-tool-timeout=90s"}); err != nil {
		t.Fatal(err)
	}
	if o.VendorToolTimeout != 90*time.Second {
		t.Errorf("--vendor-tool-timeout=90s gave %s", o.VendorToolTimeout)
	}
	o.VendorToolTimeout = 0
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--vendor-tool-timeout must be positive") {
		t.Errorf("validate 0: %v", err)
	}
}
