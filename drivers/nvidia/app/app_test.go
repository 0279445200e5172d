package app

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestFlagsSetOptions(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("nvidia-kubelet-plugin", flag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{"--node-name=dgx-7", "--mig-mode=dynamic", "--health-interval=2s", "--mps-control=", "--cdi-dir=/etc/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	if o.NodeName != "dgx-7" || o.MIGMode != "dynamic" || o.HealthInterval != 2*time.Second || o.MPSControl != "" || o.CDIDir != "/etc/cdi" {
		t.Errorf("options after flags: %+v", o)
	}
	if o.SysfsRoot != "/sys" || o.NvidiaSMI != "nvidia-smi" {
		t.Errorf("flags not given changed their defaults: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	o := NewOptions()
	o.NodeName, o.MIGMode, o.HealthInterval = "", "sometimes", 0
	err := o.Validate()
	for _, want := range []string{"--node-name", "--mig-mode", "--health-interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
