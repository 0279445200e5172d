package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/strata-sh/strata/drivers/ascend"
	"github.com/strata-sh/strata/drivers/ascend/npusmi"
	"github.com/strata-sh/strata/internal/testutil"
)

const (
	npuClass  = "ascend-npu.strata.sh"
	vnpuClass = "ascend-vnpu.strata.sh"
)

// vnpusOn lists a node's vNPUs as npu-smi reports them, "card/id:template".
func (e *env) vnpusOn(nodeName string) []string {
	e.t.Helper()
	smi := &npusmi.Client{Runner: e.hardware(nodeName).NPUSMI}
	var out []string
	for card := 0; card < 8; card++ {
		vnpus, err := smi.VNPUs(e.ctx, card, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, v := range vnpus {
			out = append(out, fmt.Sprintf("%d/%d:%s", card, v.ID, v.Template))
		}
	}
	slices.Sort(out)
	return out
}

// TestAscend runs the Ascend examples on two Atlas 800T A2 (910B3) and an
// Atlas 800 (910A).
func TestAscend(t *testing.T) {
	raw, err := os.ReadFile(examplesDir + "/ascend/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := startCluster(t, string(raw))
	dir := examplesDir + "/ascend"

	t.Run("published", func(t *testing.T) {
		e := e.with(t)
		for nodeName, model := range map[string]string{"a2-0": "910B", "a800-0": "910A"} {
			npus := e.devicesOf(nodeName, ascend.DriverName, "npu")
			if len(npus) != 8 {
				t.Fatalf("%s publishes %d NPUs, want 8", nodeName, len(npus))
			}
			for _, d := range npus {
				if stringAttr(d, "accelerator.strata.sh/model") != model || stringAttr(d, "accelerator.strata.sh/partition4") == "" {
					t.Errorf("%s %s: model %q partition4 %q", nodeName, d.Name, stringAttr(d, "accelerator.strata.sh/model"), stringAttr(d, "accelerator.strata.sh/partition4"))
				}
			}
			if len(e.devicesOf(nodeName, ascend.DriverName, "vnpu")) == 0 {
				t.Errorf("%s publishes no vNPU", nodeName)
			}
		}
	})

	t.Run("whole", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/npu-whole.yaml")
		pod := e.waitRunning("default", "npu-trainer")
		ix := e.publishedDevices()
		res := e.claimResults(pod, "npus")
		if len(res) != 2 || stringAttr(ix.of(res[0]), "accelerator.strata.sh/partition2") != stringAttr(ix.of(res[1]), "accelerator.strata.sh/partition2") {
			t.Fatalf("npu-trainer got %+v, want two NPUs of one HCCS pair", res)
		}
		view := e.sim.Nodes.Containers(pod.UID)["trainer"]
		var phys []string
		for _, r := range res {
			phys = append(phys, strings.TrimPrefix(r.Device, "npu-"))
		}
		slices.Sort(phys)
		for _, want := range []string{"/dev/davinci" + phys[0], "/dev/davinci" + phys[1], "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"} {
			if !slices.Contains(view.DeviceNodes, want) {
				t.Errorf("container nodes %v lack %s", view.DeviceNodes, want)
			}
		}
		if !slices.Contains(view.Env, "ASCEND_VISIBLE_DEVICES="+strings.Join(phys, ",")) {
			t.Errorf("container env %v, want ASCEND_VISIBLE_DEVICES=%s", view.Env, strings.Join(phys, ","))
		}
		// The host driver's user space, as Ascend's container runtime
		// mounts it (no NpuConfig: driver Mount).
		if !slices.Contains(view.Mounts, "/usr/local/Ascend/driver/lib64") || !slices.Contains(view.Mounts, "/usr/local/bin/npu-smi") {
			t.Errorf("container mounts %v lack the driver's libraries and npu-smi", view.Mounts)
		}
	})

	t.Run("bad-config", func(t *testing.T) {
		e := e.with(t)
		params := runtime.RawExtension{Raw: []byte(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"NpuConfig","driver":"Copy"}`)}
		tmpl := testutil.MakeClaimSpec().Request("npu", npuClass, 1).Config(ascend.DriverName, params).Template("default", "bad-npu-config")
		_, err := e.client.ResourceV1().ResourceClaimTemplates("default").Create(e.ctx, tmpl, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "opaque.parameters: driver: Unsupported value") {
			t.Errorf("NpuConfig driver Copy: %v, want a refusal naming the driver field", err)
		}
	})

	t.Run("vnpu", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/vnpu.yaml")
		pod := e.waitRunning("default", "vnpu-inference")
		res := e.claimResults(pod, "vnpu")[0]
		nodeName := pod.Spec.NodeName
		vnpus := e.vnpusOn(nodeName)
		if len(vnpus) != 1 || !strings.HasSuffix(vnpus[0], ":vir05_1c_16g") {
			t.Fatalf("%s has vNPUs %v, want one vir05_1c_16g", nodeName, vnpus)
		}
		id := strings.TrimSuffix(strings.SplitN(vnpus[0], "/", 2)[1], ":vir05_1c_16g")
		view := e.sim.Nodes.Containers(pod.UID)["server"]
		if !slices.Contains(view.DeviceNodes, "/dev/vdavinci"+id) || !slices.Contains(view.Env, "ASCEND_VISIBLE_DEVICES="+id) || !slices.Contains(view.Env, "ASCEND_RUNTIME_OPTIONS=VIRTUAL") {
			t.Errorf("container: nodes %v env %v, want vdavinci%s and its env", view.DeviceNodes, view.Env, id)
		}
		// The chip cannot be taken whole while the vNPU exists.
		phy := strings.SplitN(strings.TrimPrefix(res.Device, "npu-"), "-", 2)[0]
		e.createTemplate(testutil.MakeClaimSpec().Request("npu", npuClass, 1, `device.attributes["ascend.strata.sh"].phyID == `+phy).Template("default", "same-chip"))
		e.createPod(pinnedPod("whole-same-chip", nodeName, "npu", "same-chip"))
		e.waitUnschedulable("default", "whole-same-chip")
		// A plugin restart between prepare and unprepare loses nothing.
		if err := e.node(nodeName).RestartPlugin(e.ctx, ascend.DriverName); err != nil {
			t.Fatal(err)
		}
		e.deletePod("default", "vnpu-inference")
		e.eventually(30*time.Second, "vNPU destroyed", func(context.Context) (bool, error) {
			return len(e.vnpusOn(nodeName)) == 0, nil
		})
		if got := e.waitRunning("default", "whole-same-chip"); e.claimResults(got, "npu")[0].Device != "npu-"+phy {
			t.Errorf("whole-same-chip got %s", e.claimResults(got, "npu")[0].Device)
		}
	})

	t.Run("vnpu-never-overcommits", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		// Chip 0 of a2-1 gives vNPUs 60 GB: three of vir05_1c_16g.
		e.createTemplate(testutil.MakeClaimSpec().Request("vnpu", vnpuClass, 1,
			`device.attributes["ascend.strata.sh"].template == "vir05_1c_16g" && device.attributes["ascend.strata.sh"].phyID == 0`).Template("default", "chip0-vir05"))
		for i := 0; i < 4; i++ {
			e.createPod(pinnedPod(fmt.Sprintf("quarter-%d", i), "a2-1", "vnpu", "chip0-vir05"))
		}
		var waiting string
		e.eventually(60*time.Second, "three running, one waiting", func(ctx context.Context) (bool, error) {
			running, w := 0, ""
			for i := 0; i < 4; i++ {
				p := e.getPod(fmt.Sprintf("quarter-%d", i))
				switch {
				case p.Status.Phase == corev1.PodRunning:
					running++
				case isUnschedulable(p):
					w = p.Name
				}
			}
			waiting = w
			return running == 3 && w != "", nil
		})
		if got := e.vnpusOn("a2-1"); len(got) != 3 {
			t.Errorf("a2-1 has vNPUs %v, want three", got)
		}
		t.Logf("%s waits", waiting)
	})

	t.Run("gang", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(examplesDir + "/gang/topology.yaml")
		// Members take four 910B of one HCCS half; a node holds two. One
		// half of a2-0 is taken, so block-0 (a2-0, a2-1) holds three
		// members: a MustGather gang of four goes to block-1 whole.
		e.createTemplate(testutil.MakeClaimSpec().Request("npus", npuClass, 4, `device.attributes["accelerator.strata.sh"].model == "910B"`).
			MatchAttribute("accelerator.strata.sh/partition4", "npus").Template("default", "half-910b"))
		e.createTemplate(testutil.MakeClaimSpec().Request("npus", npuClass, 4, `device.attributes["ascend.strata.sh"].phyID < 4`).Template("default", "a2-0-half"))
		e.createPod(pinnedPod("half-filler", "a2-0", "npus", "a2-0-half"))
		e.waitRunning("default", "half-filler")
		e.claimGang("hccs-gang", 4, "npus", "half-910b", func(p *corev1.Pod) {
			p.Annotations = preferBlock("MustGather")
		})
		pods := e.waitGangRunning("hccs-gang", 4)
		ix := e.publishedDevices()
		for i := range pods {
			p := &pods[i]
			if p.Spec.NodeName != "a2-2" && p.Spec.NodeName != "a2-3" {
				t.Errorf("%s on %s, want block-1 (a2-2, a2-3)", p.Name, p.Spec.NodeName)
			}
			halves := map[string]bool{}
			for _, r := range e.claimResults(p, "npus") {
				halves[stringAttr(ix.of(r), "accelerator.strata.sh/partition4")] = true
			}
			if len(halves) != 1 {
				t.Errorf("%s spans HCCS groups %v", p.Name, halves)
			}
		}
	})

	t.Run("hccs", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		// One NPU taken in each ring of the Atlas 800: no ring has four
		// free.
		for _, phy := range []int{0, 4} {
			name := fmt.Sprintf("ring-filler-%d", phy)
			e.createTemplate(testutil.MakeClaimSpec().Request("npu", npuClass, 1, fmt.Sprintf(`device.attributes["ascend.strata.sh"].phyID == %d`, phy)).Template("default", name))
			e.createPod(pinnedPod(name, "a800-0", "npu", name))
			e.waitRunning("default", name)
		}
		e.applyFile(dir + "/hccs-restricted.yaml")
		e.applyFile(dir + "/hccs-besteffort.yaml")
		e.createPod(pinnedPod("restricted", "a800-0", "npus", "four-910a-one-ring"))
		e.waitUnschedulable("default", "restricted")
		e.createPod(pinnedPod("besteffort", "a800-0", "npus", "four-910a-ring-preferred"))
		be := e.waitRunning("default", "besteffort")
		if res := e.claimResults(be, "npus"); len(res) != 4 || res[0].Request != "npus/any" {
			t.Errorf("besteffort got %+v, want four NPUs from the fallback", res)
		}
		// With ring 0 free of the filler and the best-effort pod gone,
		// the restricted claim gets ring 0 whole.
		e.deletePod("default", "besteffort")
		e.deletePod("default", "ring-filler-0")
		r := e.waitRunning("default", "restricted")
		ix := e.publishedDevices()
		rings := map[string]bool{}
		for _, res := range e.claimResults(r, "npus") {
			rings[stringAttr(ix.of(res), "accelerator.strata.sh/partition4")] = true
		}
		if len(rings) != 1 {
			t.Errorf("restricted claim spans rings %v", rings)
		}
	})
}

func (e *env) getPod(name string) *corev1.Pod {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}
