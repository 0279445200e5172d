package app

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/hardware/linkmock"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// want are texts the error must contain; none: valid.
		want []string
	}{
		{name: "defaults with a node name", args: []string{"--node-name=n1"}},
		{name: "rail devices", args: []string{"--node-name=n1", "--rail-devices=mlx5_0,mlx5_3,mlx5_4"}},
		{name: "health interval", args: []string{"--node-name=n1", "--health-interval=250ms"}},
		{name: "no node name", args: nil, want: []string{"--node-name"}},
		{name: "zero health interval", args: []string{"--node-name=n1", "--health-interval=0s"}, want: []string{"--health-interval"}},
		{name: "negative health interval", args: []string{"--node-name=n1", "--health-interval=-5s"}, want: []string{"--health-interval", "-5s"}},
		{name: "empty rail entry", args: []string{"--node-name=n1", "--rail-devices=mlx5_0,,mlx5_3"}, want: []string{"--rail-devices", `""`}},
		{name: "trailing comma", args: []string{"--node-name=n1", "--rail-devices=mlx5_0,"}, want: []string{"--rail-devices", `""`}},
		{name: "space in rail entry", args: []string{"--node-name=n1", "--rail-devices=mlx5_0, mlx5_3"}, want: []string{"--rail-devices", `" mlx5_3"`}},
		{name: "path as rail entry", args: []string{"--node-name=n1", "--rail-devices=/sys/class/infiniband/mlx5_0"}, want: []string{"--rail-devices", `"/sys/class/infiniband/mlx5_0"`}},
		{name: "every fault at once", args: []string{"--health-interval=0s", "--rail-devices=a b"}, want: []string{"--node-name", "--health-interval", "--rail-devices"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			t.Setenv("POD_UID", "")
			o := NewOptions()
			fs := flag.NewFlagSet("rdma-kubelet-plugin", flag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("parse %v: %v", tc.args, err)
			}
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate(%v) = %v, want no error", tc.args, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%v) accepted it, want an error naming %v", tc.args, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate(%v) = %q, does not mention %s", tc.args, err, w)
				}
			}
		})
	}
}

func TestNewOptionsDefaults(t *testing.T) {
	t.Setenv("NODE_NAME", "node-7")
	o := NewOptions()
	if o.NodeName != "node-7" {
		t.Errorf("node name %q, want $NODE_NAME node-7", o.NodeName)
	}
	if o.HealthInterval != rdma.DefaultHealthInterval {
		t.Errorf("health interval %s, want %s", o.HealthInterval, rdma.DefaultHealthInterval)
	}
	if o.SysfsRoot != "/sys" || o.DevRoot != "/" || o.RailDevices != "" {
		t.Errorf("sysfs %q dev %q rails %q, want /sys, / and none", o.SysfsRoot, o.DevRoot, o.RailDevices)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults with $NODE_NAME do not validate: %v", err)
	}
}

func TestStartRefusesUnknownRailDevice(t *testing.T) {
	// --rail-devices reaches the backend: a device the node does not have
	// stops the plugin before it serves or publishes anything.
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	m := hardware.HGXH100CPUNICs()
	if err := hardware.WriteNode(root, m, "boot"); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.NodeName = "n1"
	o.SysfsRoot = filepath.Join(root, hardware.SysDir)
	o.DevRoot = root
	o.PluginDataDir = filepath.Join(root, "plugin")
	o.RailDevices = "mlx5_1,mlx5_0,mlx5_7"
	d, err := Start(ctx, o, nil, Host{Links: linkmock.New(m)})
	if err == nil {
		d.Stop()
		t.Fatal("Start succeeded with a rail device the node lacks")
	}
	if !strings.Contains(err.Error(), "mlx5_7") {
		t.Errorf("Start error %q does not name mlx5_7", err)
	}
}
