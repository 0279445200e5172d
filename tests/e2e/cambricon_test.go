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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/strata-sh/strata/drivers/cambricon"
	"github.com/strata-sh/strata/drivers/cambricon/cnmon"
	"github.com/strata-sh/strata/internal/testutil"
)

const (
	mluClass  = "cambricon-mlu.strata.sh"
	smluClass = "cambricon-smlu.strata.sh"
)

// smlusOn lists a node's sMLU instances as cnmon reports them,
// "card/id:vcore%/MiB", and the cards whose sMLU mode is on.
func (e *env) smlusOn(nodeName string) (instances []string, modeOn []int) {
	e.t.Helper()
	tool := &cnmon.Client{Runner: e.hardware(nodeName).CNMON}
	for card := 0; card < 16; card++ {
		info, err := tool.SMLUInfo(e.ctx, card)
		if err != nil {
			e.t.Fatal(err)
		}
		if info.Enabled {
			modeOn = append(modeOn, card)
		}
		for _, in := range info.Instances {
			instances = append(instances, fmt.Sprintf("%d/%d:%d%%/%d", card, in.ID, in.VCorePercent, in.MemoryMB))
		}
	}
	slices.Sort(instances)
	return instances, modeOn
}

// cardClaim is a claim for card of a node, whole or as a share.
func cardClaim(request, class string, card int, share map[string]string) *testutil.ClaimSpecWrapper {
	c := testutil.MakeClaimSpec().Request(request, class, 1, fmt.Sprintf(`device.attributes["cambricon.strata.sh"].card == %d`, card))
	if share != nil {
		c.Capacity(share)
	}
	return c
}

// TestCambricon runs the Cambricon examples on two MLU370-X8 servers.
func TestCambricon(t *testing.T) {
	raw, err := os.ReadFile(examplesDir + "/cambricon/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := startCluster(t, string(raw))
	dir := examplesDir + "/cambricon"

	t.Run("published", func(t *testing.T) {
		e := e.with(t)
		for _, nodeName := range []string{"mlu370-0", "mlu370-1"} {
			mlus := e.devicesOf(nodeName, cambricon.DriverName, "mlu")
			if len(mlus) != 16 {
				t.Fatalf("%s publishes %d MLUs, want 16", nodeName, len(mlus))
			}
			for k := 0; k < 16; k++ {
				d, ok := mlus[fmt.Sprintf("mlu-%d", k)]
				if !ok {
					t.Fatalf("%s publishes no mlu-%d", nodeName, k)
				}
				if got, want := stringAttr(d, "accelerator.strata.sh/partition2"), fmt.Sprintf("board-%d", k/2); got != want {
					t.Errorf("%s mlu-%d partition2 %q, want %q", nodeName, k, got, want)
				}
				if got, want := stringAttr(d, "accelerator.strata.sh/partition8"), fmt.Sprintf("mlulink-%d", k/8); got != want {
					t.Errorf("%s mlu-%d partition8 %q, want %q", nodeName, k, got, want)
				}
				vcore, vmem := d.Capacity[cambricon.CapacityVCore].Value, d.Capacity[cambricon.CapacityVMemory].Value
				if vcore.Cmp(resource.MustParse("100")) != 0 || vmem.Cmp(resource.MustParse("23296Mi")) != 0 || d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
					t.Errorf("%s mlu-%d: vcore %s vmemory %s allowMultipleAllocations %v, want a shared card of 100 and 23296Mi", nodeName, k, vcore.String(), vmem.String(), d.AllowMultipleAllocations)
				}
			}
		}
	})

	t.Run("whole", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/mlu-whole.yaml")
		pod := e.waitRunning("default", "mlu-trainer")
		ix := e.publishedDevices()
		res := e.claimResults(pod, "mlus")
		if len(res) != 2 || stringAttr(ix.of(res[0]), "accelerator.strata.sh/partition2") != stringAttr(ix.of(res[1]), "accelerator.strata.sh/partition2") {
			t.Fatalf("mlu-trainer got %+v, want the two cards of one board", res)
		}
		var cards []string
		for _, r := range res {
			cards = append(cards, strings.TrimPrefix(r.Device, "mlu-"))
		}
		slices.Sort(cards)
		view := e.sim.Nodes.Containers(pod.UID)["trainer"]
		for _, want := range []string{"/dev/cambricon_ctl", "/dev/cambricon_dev" + cards[0], "/dev/cambricon_ipcm" + cards[0], "/dev/cambricon_dev" + cards[1], "/dev/cambricon_ipcm" + cards[1]} {
			if !slices.Contains(view.DeviceNodes, want) {
				t.Errorf("container nodes %v lack %s", view.DeviceNodes, want)
			}
		}
		if want := "CAMBRICON_VISIBLE_DEVICES=" + strings.Join(cards, ","); !slices.Contains(view.Env, want) {
			t.Errorf("container env %v, want %s", view.Env, want)
		}
		if !slices.Contains(view.Mounts, cnmon.DefaultBinary) {
			t.Errorf("container mounts %v lack cnmon", view.Mounts)
		}
		// Whole cards are given as they are: no sMLU made, no mode changed.
		if in, on := e.smlusOn(pod.Spec.NodeName); len(in) != 0 || len(on) != 0 {
			t.Errorf("%s: sMLUs %v, sMLU mode on %v, want none", pod.Spec.NodeName, in, on)
		}
	})

	t.Run("bad-config", func(t *testing.T) {
		e := e.with(t)
		params := runtime.RawExtension{Raw: []byte(`{"apiVersion":"config.strata.sh/v1alpha1","kind":"MluConfig","cnmon":"Sometimes"}`)}
		tmpl := testutil.MakeClaimSpec().Request("mlu", mluClass, 1).Config(cambricon.DriverName, params).Template("default", "bad-mlu-config")
		_, err := e.client.ResourceV1().ResourceClaimTemplates("default").Create(e.ctx, tmpl, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "opaque.parameters: cnmon: Unsupported value") {
			t.Errorf("MluConfig cnmon Sometimes: %v, want a refusal naming the cnmon field", err)
		}
	})

	t.Run("smlu", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		e.applyFile(dir + "/smlu.yaml")
		pod := e.waitRunning("default", "test-cambricon-partial")
		nodeName := pod.Spec.NodeName
		res := e.claimResults(pod, "smlu")[0]
		vcore, vmem := res.ConsumedCapacity[cambricon.CapacityVCore], res.ConsumedCapacity[cambricon.CapacityVMemory]
		if res.ShareID == nil || vcore.Cmp(resource.MustParse("10")) != 0 || vmem.Cmp(resource.MustParse("1Gi")) != 0 {
			t.Fatalf("allocation %+v, want a share of 10 vcore and 1Gi", res)
		}
		card := strings.TrimPrefix(res.Device, "mlu-")
		in, on := e.smlusOn(nodeName)
		if len(in) != 1 || !strings.HasPrefix(in[0], card+"/") || !strings.HasSuffix(in[0], ":10%/1024") || len(on) != 1 {
			t.Fatalf("%s has sMLUs %v with sMLU mode on %v, want one of 10%% and 1024 MiB on card %s", nodeName, in, on, card)
		}
		id := strings.TrimPrefix(strings.SplitN(in[0], ":", 2)[0], card+"/")
		view := e.sim.Nodes.Containers(pod.UID)["demo-sleep"]
		for _, want := range []string{"/dev/cambricon_ctl", "/dev/cambricon_dev" + card, "/dev/cambricon-caps/cap_dev" + card + "_mi" + id} {
			if !slices.Contains(view.DeviceNodes, want) {
				t.Errorf("container nodes %v lack %s", view.DeviceNodes, want)
			}
		}
		for _, want := range []string{"CAMBRICON_VISIBLE_DEVICES=" + card, "CAMBRICON_DSMLU_PROFILE=10p.1024mb"} {
			if !slices.Contains(view.Env, want) {
				t.Errorf("container env %v lacks %s", view.Env, want)
			}
		}
		// The card cannot be taken whole while the sMLU exists.
		k := 0
		fmt.Sscan(card, &k)
		e.createTemplate(cardClaim("mlu", mluClass, k, nil).Template("default", "same-card"))
		e.createPod(pinnedPod("whole-same-card", nodeName, "mlu", "same-card"))
		e.waitUnschedulable("default", "whole-same-card")
		// A plugin restart between prepare and unprepare loses nothing.
		if err := e.node(nodeName).RestartPlugin(e.ctx, cambricon.DriverName); err != nil {
			t.Fatal(err)
		}
		e.deletePod("default", "test-cambricon-partial")
		e.eventually(30*time.Second, "sMLU destroyed and sMLU mode back off", func(context.Context) (bool, error) {
			in, on := e.smlusOn(nodeName)
			return len(in) == 0 && len(on) == 0, nil
		})
		if got := e.waitRunning("default", "whole-same-card"); e.claimResults(got, "mlu")[0].Device != res.Device {
			t.Errorf("whole-same-card got %s, want %s", e.claimResults(got, "mlu")[0].Device, res.Device)
		}
	})

	t.Run("smlu-never-overcommits", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		// Card 0 of mlu370-1 in tenths of its MLU time: ten fit, the
		// eleventh waits. Card 1 in 10Gi of its 23296Mi: two fit.
		e.createTemplate(cardClaim("smlu", smluClass, 0, map[string]string{"vcore": "10", "vmemory": "256Mi"}).Template("default", "card0-tenth"))
		e.createTemplate(cardClaim("smlu", smluClass, 1, map[string]string{"vcore": "5", "vmemory": "10Gi"}).Template("default", "card1-10gi"))
		for i := 0; i < 11; i++ {
			e.createPod(pinnedPod(fmt.Sprintf("tenth-%d", i), "mlu370-1", "smlu", "card0-tenth"))
		}
		for i := 0; i < 3; i++ {
			e.createPod(pinnedPod(fmt.Sprintf("tengi-%d", i), "mlu370-1", "smlu", "card1-10gi"))
		}
		e.eventually(90*time.Second, "ten tenths and two 10Gi shares running, one of each waiting", func(ctx context.Context) (bool, error) {
			count := func(prefix string, n int) (running, waiting int) {
				for i := 0; i < n; i++ {
					switch p := e.getPod(fmt.Sprintf("%s-%d", prefix, i)); {
					case p.Status.Phase == corev1.PodRunning:
						running++
					case isUnschedulable(p):
						waiting++
					}
				}
				return running, waiting
			}
			r0, w0 := count("tenth", 11)
			r1, w1 := count("tengi", 3)
			return r0 == 10 && w0 == 1 && r1 == 2 && w1 == 1, nil
		})
		in, _ := e.smlusOn("mlu370-1")
		perCard := map[string]int{}
		for _, s := range in {
			perCard[strings.SplitN(s, "/", 2)[0]]++
		}
		if perCard["0"] != 10 || perCard["1"] != 2 || len(perCard) != 2 {
			t.Errorf("mlu370-1 has sMLUs %v, want ten on card 0 and two on card 1", in)
		}
	})

	t.Run("mlulink", func(t *testing.T) {
		e := e.with(t)
		defer e.deleteAllPods()
		// One card taken in each MLU-Link group of mlu370-1: no group has
		// eight free, and the restricted claim waits.
		for _, k := range []int{0, 8} {
			name := fmt.Sprintf("group-filler-%d", k)
			e.createTemplate(cardClaim("mlu", mluClass, k, nil).Template("default", name))
			e.createPod(pinnedPod(name, "mlu370-1", "mlu", name))
			e.waitRunning("default", name)
		}
		// The example's pod finds a free group on the other server only.
		e.applyFile(dir + "/mlulink-8.yaml")
		if p := e.waitRunning("default", "mlulink-trainer"); p.Spec.NodeName != "mlu370-0" {
			t.Errorf("mlulink-trainer on %s, want mlu370-0", p.Spec.NodeName)
		}
		e.createPod(pinnedPod("restricted", "mlu370-1", "mlus", "eight-mlu-one-mlulink-group"))
		e.waitUnschedulable("default", "restricted")
		e.deletePod("default", "group-filler-8")
		p := e.waitRunning("default", "restricted")
		ix := e.publishedDevices()
		groups := map[string]bool{}
		if res := e.claimResults(p, "mlus"); len(res) != 8 {
			t.Errorf("restricted claim got %d cards, want 8", len(res))
		}
		for _, r := range e.claimResults(p, "mlus") {
			groups[stringAttr(ix.of(r), "accelerator.strata.sh/partition8")] = true
		}
		if len(groups) != 1 || !groups["mlulink-1"] {
			t.Errorf("restricted claim got groups %v, want mlulink-1 alone", groups)
		}
	})
}
