package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/strata-sh/strata/deployments/chart"
	"github.com/strata-sh/strata/drivers/ascend"
	"github.com/strata-sh/strata/drivers/cambricon"
	"github.com/strata-sh/strata/drivers/nvidia"
	"github.com/strata-sh/strata/drivers/rdma"
	"github.com/strata-sh/strata/hardware"
	"github.com/strata-sh/strata/sim/cluster"
	"github.com/strata-sh/strata/sim/controlplane"
	"github.com/strata-sh/strata/sim/realnode"
)

// RealNodes is what a cluster with real node groups needs.
type RealNodes struct {
	Tools realnode.Tools
	// PluginBinDir holds the kubelet plugin binaries (make build's bin/)
	// that the plugins' images are assembled from.
	PluginBinDir string
}

// Images of the plugins on real nodes: the Dockerfile's targets, named in
// a registry that does not exist and never pulled.
const (
	ImageRegistry = "strata.local"
	ImageTag      = "dev"
)

// realNodesDir is the work directory's folder of real node folders (short:
// plugin sockets live below it).
const realNodesDir = "r"

// vendorDrivers are the chart's plugins.<vendor> keys with their drivers.
var vendorDrivers = map[string]string{
	"nvidia": nvidia.DriverName, "ascend": ascend.DriverName,
	"cambricon": cambricon.DriverName, "rdma": rdma.DriverName,
}

// realVendors are the plugins a real node of group g runs.
func realVendors(g cluster.NodeGroup) []string {
	m, err := hardware.Lookup(g.Hardware)
	if err != nil {
		return nil
	}
	var out []string
	if len(m.GPUs()) > 0 {
		out = append(out, "nvidia")
	}
	if len(m.NPUs()) > 0 {
		out = append(out, "ascend")
	}
	if len(m.MLUs()) > 0 {
		out = append(out, "cambricon")
	}
	if g.RDMA {
		out = append(out, "rdma")
	}
	return out
}

// startRealNodes starts the cluster's real nodes with their plugins and
// waits for their devices.
func (s *Sim) startRealNodes(ctx context.Context, cfg Config) error {
	if cfg.Cluster.RealNodeCount() == 0 {
		return nil
	}
	if cfg.RealNodes == nil {
		return fmt.Errorf("the cluster has real node groups: give strata-sim the real-node tools (hack/realnode/install.sh, $%s) and the plugin binaries (make build)", realnode.ToolsEnv)
	}
	if err := realnode.CanRun(); err != nil {
		return fmt.Errorf("real node groups: %w", err)
	}
	dir := filepath.Join(s.dir, realNodesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archives, err := s.realNodeImages(dir, cfg)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := s.ControlPlane.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	i := 0
	for _, g := range cfg.Cluster.NodeGroups {
		if !g.Real {
			continue
		}
		for j := 0; j < g.Count; j++ {
			spec := realnode.Spec{Name: g.NodeName(j), Labels: g.NodeLabels(j), Taints: g.Taints, MaxPods: g.Pods, Kubeconfig: kubeconfig}
			n, err := realnode.Start(ctx, cfg.RealNodes.Tools, filepath.Join(dir, fmt.Sprint(i)), spec, s.ControlPlane.Client, archives...)
			i++
			if err != nil {
				return err
			}
			s.realNodes = append(s.realNodes, n)
			for _, vendor := range realVendors(g) {
				values := map[string]any{"plugins": map[string]any{vendor: map[string]any{"simulate": g.Hardware}}}
				if vendor == "nvidia" {
					mig := g.MIG
					if mig == "" {
						mig = cluster.MIGStatic
					}
					values = loader.MergeMaps(values, map[string]any{"plugins": map[string]any{"nvidia": map[string]any{"driver": map[string]any{"migMode": mig}}}})
				}
				ds, err := PluginDaemonSet(n, vendor, loader.MergeMaps(cfg.ChartValues, values))
				if err != nil {
					return err
				}
				if _, err := s.RunPlugin(ctx, n, ds, ds.Name); err != nil {
					return err
				}
				if err := s.WaitDevices(ctx, n, vendorDrivers[vendor]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// realNodeImages writes the archives every real node imports: busybox
// for pods and each plugin's image, from the binaries in PluginBinDir.
func (s *Sim) realNodeImages(dir string, cfg Config) ([]string, error) {
	busybox, err := realnode.BusyboxImage(cfg.RealNodes.Tools.Busybox)
	if err != nil {
		return nil, err
	}
	images := map[string]realnode.Image{"busybox": busybox}
	for _, g := range cfg.Cluster.NodeGroups {
		if !g.Real {
			continue
		}
		for _, vendor := range realVendors(g) {
			name := vendor + "-kubelet-plugin"
			img, err := realnode.BinaryImage(name, filepath.Join(cfg.RealNodes.PluginBinDir, name), ImageRegistry+"/"+name+":"+ImageTag)
			if err != nil {
				return nil, fmt.Errorf("image of %s (run make build): %w", name, err)
			}
			images[name] = img
		}
	}
	var archives []string
	for name, img := range images {
		archive := filepath.Join(dir, name+".tar")
		if err := img.WriteArchive(archive); err != nil {
			return nil, fmt.Errorf("image %s: %w", name, err)
		}
		archives = append(archives, archive)
	}
	return archives, nil
}

// PluginDaemonSet renders the chart's DaemonSet of a vendor's plugin for
// real node n: its kubelet and CDI folders, the images assembled for real
// nodes, the plugin on and its metrics off, and values over them.
func PluginDaemonSet(n *realnode.Node, vendor string, values map[string]any) (*appsv1.DaemonSet, error) {
	base := map[string]any{
		"kubeletDir": n.KubeletDir(),
		"cdiDir":     n.CDIDir(),
		"image":      map[string]any{"registry": ImageRegistry, "tag": ImageTag, "pullPolicy": "Never"},
		"plugins":    map[string]any{vendor: map[string]any{"enabled": true, "metricsPort": 0}},
	}
	if vendor == "nvidia" {
		// The node has no NVIDIA driver: its root is an empty folder.
		root := filepath.Join(n.Dir, "nvidia-driver")
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		base["plugins"].(map[string]any)["nvidia"].(map[string]any)["driver"] = map[string]any{"root": root}
	}
	r, err := chart.Render(chart.DefaultRelease, loader.MergeMaps(base, values))
	if err != nil {
		return nil, err
	}
	for _, m := range r.Templates {
		for _, doc := range strings.Split(string(m.Content), "\n---") {
			if !strings.Contains(doc, "kind: DaemonSet") || !strings.Contains(doc, vendor+"-kubelet-plugin") {
				continue
			}
			ds := &appsv1.DaemonSet{}
			if err := yaml.Unmarshal([]byte(doc), ds); err != nil {
				return nil, err
			}
			if ds.Kind == "DaemonSet" {
				return ds, nil
			}
		}
	}
	return nil, fmt.Errorf("the chart renders no %s plugin DaemonSet", vendor)
}

// RunPlugin runs the plugin of ds on real node n as a static pod named
// name (a second name is a second plugin pod beside the first, as a
// rolling update with maxSurge makes), with the identity its service
// account has there and hostDirs (fake hardware) mounted at their paths,
// and returns its mirror pod's name once its container runs.
func (s *Sim) RunPlugin(ctx context.Context, n *realnode.Node, ds *appsv1.DaemonSet, name string, hostDirs ...string) (string, error) {
	node, err := s.ControlPlane.Client.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	sa := ds.Spec.Template.Spec.ServiceAccountName
	id := controlplane.ServiceAccount(ds.Namespace, sa).OnNode(n.Name(), string(node.UID))
	kubeconfig := filepath.Join(n.Dir, sa+".kubeconfig")
	if err := s.ControlPlane.WriteKubeconfigAs(kubeconfig, id); err != nil {
		return "", err
	}
	pod := realnode.PluginPod(name, ds.Namespace, ds.Spec.Template, kubeconfig)
	for i, d := range hostDirs {
		vol := fmt.Sprintf("hardware-%d", i)
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: d})
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: d}}})
	}
	if err := n.RunStaticPod(pod); err != nil {
		return "", err
	}
	mirror := pod.Name + "-" + n.Name()
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.ControlPlane.Client.CoreV1().Pods(pod.Namespace).Get(ctx, mirror, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("plugin pod %s/%s does not run: %w%s", pod.Namespace, mirror, err, logsOf(n))
	}
	return mirror, nil
}

// WaitDevices waits for a driver's ResourceSlices of real node n; the
// error carries the tail of the node's plugin logs.
func (s *Sim) WaitDevices(ctx context.Context, n *realnode.Node, driver string) error {
	node := n.Name()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		slices, err := s.ControlPlane.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, sl := range slices.Items {
			if sl.Spec.Driver == driver && sl.Spec.NodeName != nil && *sl.Spec.NodeName == node && len(sl.Spec.Devices) > 0 {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no %s devices published for real node %s: %w%s", driver, node, err, logsOf(n))
	}
	return nil
}

// logsOf is the tail of the node's plugin containers' logs, for errors.
func logsOf(n *realnode.Node) string {
	var b strings.Builder
	for f, log := range n.ContainerLogs("strata-system", "") {
		fmt.Fprintf(&b, "\n%s:\n%s", f, log)
	}
	return b.String()
}

// RealNodes are the cluster's real nodes.
func (s *Sim) RealNodes() []*realnode.Node { return s.realNodes }
