package realnode

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// The node folder's layout. Paths are short on purpose: kubelet plugin
// sockets under k/plugins_registry/ and k/plugins/<driver>/ must stay
// within the 107 bytes of a unix socket path.
const (
	kubeletDir    = "k"
	containerdDir = "containerd"
	stateDir      = "run"
	cdiDir        = "cdi"
	logsDir       = "logs"
	manifestsDir  = "manifests"
	cniConfDir    = "cni"
	socketName    = "containerd.sock"
)

// containerdConfig is containerd 2.x's configuration (version 3) for one
// node: every folder it writes under the node's folder, CDI specs read
// from the node's CDI folder, and the one setting this kind of machine
// needs (the process tree lacks CAP_SYS_RESOURCE, so the sandbox's
// negative OOM score adjustment is clamped).
func (n *Node) containerdConfig() string {
	d := n.Dir
	q := strconv.Quote
	return fmt.Sprintf(`version = 3
root = %s
state = %s

[grpc]
  address = %s

[plugins.'io.containerd.internal.v1.opt']
  path = %s

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %s

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [%s]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %s
        Root = %s
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%s]
    conf_dir = %s

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`,
		q(filepath.Join(d, containerdDir)), q(filepath.Join(d, stateDir, "containerd")),
		q(n.socket()),
		q(filepath.Join(d, containerdDir, "opt")),
		q(PauseImage),
		q(filepath.Join(d, cdiDir)),
		q(n.tools.Runc), q(filepath.Join(d, stateDir, "runc")),
		q(n.tools.CNIDir), q(filepath.Join(d, cniConfDir)))
}

// cniConfig gives containerd a network to report ready. Pods on real
// nodes run on the host network: a pod network would need a bridge and
// routes on the host.
const cniConfig = `{"cniVersion": "1.0.0", "name": "strata-loopback", "plugins": [{"type": "loopback"}]}`

// kubeletConfig is the node's KubeletConfiguration: the kubelet listens
// on loopback only (the API server reaches it there), trusts every caller
// (test clusters only), uses the node's own cgroup root, and writes its
// logs under the node's folder.
func (n *Node) kubeletConfig() ([]byte, error) {
	taints := make([]map[string]any, 0, len(n.spec.Taints))
	for _, t := range n.spec.Taints {
		taints = append(taints, map[string]any{"key": t.Key, "value": t.Value, "effect": string(t.Effect)})
	}
	cfg := map[string]any{
		"apiVersion":                "kubelet.config.k8s.io/v1beta1",
		"kind":                      "KubeletConfiguration",
		"address":                   "127.0.0.1",
		"port":                      n.Port,
		"readOnlyPort":              0,
		"healthzPort":               0,
		"authentication":            map[string]any{"anonymous": map[string]any{"enabled": true}, "webhook": map[string]any{"enabled": false}},
		"authorization":             map[string]any{"mode": "AlwaysAllow"},
		"cgroupDriver":              "cgroupfs",
		"cgroupRoot":                n.cgroupRoot(),
		"cgroupsPerQOS":             true,
		"failCgroupV1":              false,
		"failSwapOn":                false,
		"enforceNodeAllocatable":    []string{},
		"makeIPTablesUtilChains":    false,
		"containerRuntimeEndpoint":  "unix://" + n.socket(),
		"podLogsDir":                filepath.Join(n.Dir, logsDir, "pods"),
		"staticPodPath":             filepath.Join(n.Dir, manifestsDir),
		"fileCheckFrequency":        "1s",
		"syncFrequency":             "5s",
		"nodeStatusUpdateFrequency": "5s",
		"evictionHard": map[string]string{
			"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%",
		},
		"imageGCHighThresholdPercent":   100,
		"imageGCLowThresholdPercent":    99,
		"serializeImagePulls":           false,
		"maxPods":                       n.spec.MaxPods,
		"registerWithTaints":            taints,
		"resolvConf":                    "/etc/resolv.conf",
		"protectKernelDefaults":         false,
		"localStorageCapacityIsolation": true,
		"shutdownGracePeriod":           "0s",
	}
	return yaml.Marshal(cfg)
}

// kubeletArgs are the kubelet's flags; everything else is in its
// configuration file.
func (n *Node) kubeletArgs() []string {
	labels := make([]string, 0, len(n.spec.Labels))
	for k, v := range n.spec.Labels {
		labels = append(labels, k+"="+v)
	}
	args := []string{
		"--config=" + filepath.Join(n.Dir, "kubelet.yaml"),
		"--kubeconfig=" + n.spec.Kubeconfig,
		"--root-dir=" + filepath.Join(n.Dir, kubeletDir),
		"--cert-dir=" + filepath.Join(n.Dir, kubeletDir, "pki"),
		"--hostname-override=" + n.spec.Name,
		"--v=" + strconv.Itoa(n.spec.Verbosity),
	}
	if len(labels) > 0 {
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	return args
}
