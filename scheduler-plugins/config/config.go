// Package config holds the KubeSchedulerConfiguration strata-scheduler
// ships with.
package config

import (
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/deployments"
)

// ProfileName is the scheduler name of Strata's profile; pods select it
// with spec.schedulerName.
const ProfileName = "strata-scheduler"

// Default returns the shipped KubeSchedulerConfiguration as YAML: the
// Helm chart's files/scheduler-config.yaml.
func Default() []byte { return deployments.SchedulerConfig() }

// ForKubeconfig returns the shipped configuration adjusted to run a single
// scheduler against the API server in kubeconfig: no leader election.
func ForKubeconfig(base []byte, kubeconfig string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(base, &cfg); err != nil {
		return nil, fmt.Errorf("parse scheduler configuration: %w", err)
	}
	conn, _ := cfg["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = kubeconfig
	conn["qps"] = 5000
	conn["burst"] = 10000
	cfg["clientConnection"] = conn
	le, _ := cfg["leaderElection"].(map[string]any)
	if le == nil {
		le = map[string]any{}
	}
	le["leaderElect"] = false
	cfg["leaderElection"] = le
	return yaml.Marshal(cfg)
}
