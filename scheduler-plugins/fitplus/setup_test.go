package fitplus_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
)

// strata-scheduler's own start (kube-scheduler's Setup, with Strata's
// registry as cmd/strata-scheduler passes it) on Koordinator's
// configuration: the plugins come up in the profile, next to the default
// ones, and an invalid field stops the start with the field's path.
func TestSchedulerSetup(t *testing.T) {
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
	}))
	defer server.Close()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- cluster: {insecure-skip-tls-verify: true, server: %s}
  name: default
contexts:
- context: {cluster: default, user: default}
  name: default
current-context: default
users:
- name: default
  user: {username: config}
`, server.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	base := koordinatorConfig + `  plugins:
    score:
      enabled:
      - name: NodeResourcesFitPlus
        weight: 2
      - name: ScarceResourceAvoidance
        weight: 2
clientConnection:
  kubeconfig: '` + kubeconfig + "'\n"

	tests := map[string]struct {
		config  string
		wantErr string
	}{
		"Koordinator's configuration": {config: base},
		"misspelt type": {
			config:  strings.Replace(base, "MostAllocated", "MostAlocated", 1),
			wantErr: `initializing plugin "NodeResourcesFitPlus": invalid NodeResourcesFitPlus args: resources[nvidia.com/gpu].type: Unsupported value: "MostAlocated": supported values: "LeastAllocated", "MostAllocated"`,
		},
		"unknown field": {
			config:  strings.Replace(base, "{type: LeastAllocated, weight: 1}", "{type: LeastAllocated, wieght: 1}", 1),
			wantErr: `unknown field "resources.cpu.wieght"`,
		},
	}
	registry := schedulerplugins.Registry()
	var withPlugins []app.Option
	for name, factory := range registry {
		withPlugins = append(withPlugins, app.WithPlugin(name, factory))
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			opts := options.NewOptions()
			opts.ConfigFile = path
			listener, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer listener.Close()
			opts.SecureServing.Listener = listener
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, sched, err := app.Setup(ctx, opts, withPlugins...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			profile := sched.Profiles["koord-scheduler"]
			if profile == nil {
				t.Fatal("no koord-scheduler profile")
			}
			var score []string
			for _, p := range profile.ListPlugins().Score.Enabled {
				score = append(score, fmt.Sprintf("%s×%d", p.Name, p.Weight))
			}
			for _, want := range []string{"NodeResourcesFitPlus×2", "ScarceResourceAvoidance×2"} {
				if !slices.Contains(score, want) {
					t.Errorf("score plugins %v lack %s", score, want)
				}
			}
		})
	}
}
