package cluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseErrorsNameTheField(t *testing.T) {
	tests := map[string]struct {
		body string
		want []string
	}{
		"unknown field": {
			body: "apiVersion: sim.strata.sh/v1alpha1\nkind: Cluster\nnodeGroups:\n- name: a\n  count: 1\n  gpus: 8\n",
			want: []string{`unknown field "nodeGroups[0].gpus"`},
		},
		"bad count and hardware": {
			body: "apiVersion: sim.strata.sh/v1alpha1\nkind: Cluster\nnodeGroups:\n- name: a\n  count: 0\n  hardware: dgx-h900\n",
			want: []string{"nodeGroups[0].count", "nodeGroups[0].hardware", "nvidia-dgx-h100"},
		},
		"bad quantity": {
			body: "apiVersion: sim.strata.sh/v1alpha1\nkind: Cluster\nnodeGroups:\n- name: a\n  count: 1\n  memory: lots\n",
			want: []string{"nodeGroups[0].memory"},
		},
		"bad placeholder": {
			body: "apiVersion: sim.strata.sh/v1alpha1\nkind: Cluster\nnodeGroups:\n- name: a\n  count: 1\n  labels:\n    block: b{node}\n",
			want: []string{"nodeGroups[0].labels[block]", "{index/N}"},
		},
		"wrong kind": {
			body: "apiVersion: v1\nkind: Pod\nnodeGroups:\n- name: a\n  count: 1\n",
			want: []string{"apiVersion", "kind"},
		},
		"rdma without hardware": {
			body: "apiVersion: sim.strata.sh/v1alpha1\nkind: Cluster\nnodeGroups:\n- name: a\n  count: 1\n  rdma: true\n",
			want: []string{"nodeGroups[0].rdma", "needs a hardware preset"},
		},
		"duplicate group": {
			body: "apiVersion: sim.strata.sh/v1alpha1\nkind: Cluster\nnodeGroups:\n- name: a\n  count: 1\n- name: a\n  count: 1\n",
			want: []string{"nodeGroups[1].name"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.body))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestNodeSpecs(t *testing.T) {
	c, err := Parse([]byte(`
apiVersion: sim.strata.sh/v1alpha1
kind: Cluster
nodeGroups:
- name: gpu
  count: 12
  hardware: nvidia-dgx-h100
  labels:
    network.topology.nvidia.com/block: block-{index/4}
    rack: r{index}
- name: cpu
  count: 1
  namePrefix: worker-
`))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := c.NodeSpecs()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 13 || c.NodeCount() != 13 {
		t.Fatalf("%d specs, want 13", len(specs))
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"gpu-00", "gpu-01", "gpu-11", "worker-0"}, []string{names[0], names[1], names[11], names[12]}); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if got := specs[5].Labels; got["network.topology.nvidia.com/block"] != "block-1" || got["rack"] != "r5" {
		t.Errorf("labels of gpu-05 = %v", got)
	}
	if len(specs[0].Plugins) != 1 || specs[0].Plugins[0].Driver != "nvidia.strata.sh" {
		t.Errorf("GPU node plugins = %+v", specs[0].Plugins)
	}
	if len(specs[12].Plugins) != 0 {
		t.Errorf("CPU node has plugins %+v", specs[12].Plugins)
	}
	if cpu := specs[12].Capacity.Cpu().String(); cpu != DefaultCPU {
		t.Errorf("default cpu = %s", cpu)
	}
}
