package replay

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
)

// mix is what the trace's description says a variant changes: the share
// of CPU-only pods among the pods, and the share of the GPU request that
// sharing, multi-GPU and model-constrained pods carry.
type mix struct {
	pods                          int
	cpu, share, multi, constraint float64
}

func mixOf(pods []TracePod) mix {
	var m mix
	var total, share, multi, pinned float64
	cpu := 0
	for _, p := range pods {
		g := float64(p.GPUMilli())
		total += g
		switch kindOf(p) {
		case cpuOnly:
			cpu++
		case gpuShare:
			share += g
		case multiGPU:
			multi += g
		}
		if len(p.Models) > 0 {
			pinned += g
		}
	}
	m.pods = len(pods)
	m.cpu, m.share, m.multi, m.constraint = 100*float64(cpu)/float64(len(pods)), 100*share/total, 100*multi/total, 100*pinned/total
	return m
}

func (m mix) String() string {
	return fmt.Sprintf("%d pods, CPU-only %.1f %%, of the GPU request: sharing %.1f %%, multi-GPU %.1f %%, constrained %.1f %%", m.pods, m.cpu, m.share, m.multi, m.constraint)
}

// TestDerivedVariantsMatchThePublishedOnes: deriving the published
// variants from the default list gives the mix of the published files
// (the derivation is the trace's own), and the variants beyond them have
// the mix their names ask for.
func TestDerivedVariantsMatchThePublishedOnes(t *testing.T) {
	if _, err := ReadNodes(filepath.Join(traceDir, "openb_node_list_gpu_node.csv")); err != nil {
		t.Skipf("openb trace not available: %v", err)
	}
	near := func(got, want, tol float64) bool { return math.Abs(got-want) <= tol }
	for _, v := range []string{"cpu050", "cpu100", "cpu200", "gpushare40", "gpushare60", "multigpu20", "multigpu30", "gpuspec10", "gpuspec20"} {
		published, err := ReadPods(filepath.Join(traceDir, "openb_pod_list_"+v+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		def, err := ReadPods(filepath.Join(traceDir, "openb_pod_list_default.csv"))
		if err != nil {
			t.Fatal(err)
		}
		var constrained []TracePod
		for _, p := range published {
			if len(p.Models) > 0 {
				constrained = append(constrained, p)
			}
		}
		derived, err := DeriveVariant(def, constrained, v, DeriveSeed)
		if err != nil {
			t.Fatal(err)
		}
		// What the name says is within a point and a half of the
		// published list; the rest of the mix follows default's, as the
		// published lists' do, within their own draws' spread.
		got, want := mixOf(derived), mixOf(published)
		tol := map[string]float64{"cpu": 2.5, "gpushare": 2.5, "multigpu": 2.5, "gpuspec": 2.5}
		tol[variantName.FindStringSubmatch(v)[1]] = 1.5
		if !near(float64(got.pods), float64(want.pods), 0.02*float64(want.pods)) || !near(got.cpu, want.cpu, min(tol["cpu"], 0.3)) ||
			!near(got.share, want.share, tol["gpushare"]) || !near(got.multi, want.multi, tol["multigpu"]) || !near(got.constraint, want.constraint, tol["gpuspec"]) {
			t.Errorf("%s derived: %v\npublished: %v", v, got, want)
		}
	}

	nodes, _ := ReadNodes(filepath.Join(traceDir, "openb_node_list_gpu_node.csv"))
	for _, v := range BeyondVariants {
		pods, err := LoadPods(traceDir, v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		m := mixOf(pods)
		var ok bool
		switch v {
		case "cpu250":
			ok = near(m.cpu, 25, 0.1)
		case "gpuspec25":
			ok = near(m.constraint, 25, 0.5)
		case "gpuspec33":
			ok = near(m.constraint, 33, 0.5)
		case "gpushare80":
			ok = near(m.share, 80, 2)
		case "gpushare100":
			ok = m.share == 100 && m.cpu > 0
		case "multigpu40":
			ok = near(m.multi, 40, 1)
		case "multigpu50":
			ok = near(m.multi, 50, 1)
		}
		if !ok {
			t.Errorf("%s: %v", v, m)
		}
		// Every constraint names a model some node has enough GPUs of.
		for _, p := range pods {
			if len(p.Models) == 0 {
				continue
			}
			if !slices.ContainsFunc(nodes, func(n TraceNode) bool { return n.GPUs >= p.GPUs && slices.Contains(p.Models, n.Model) }) {
				t.Errorf("%s: pod %s (%d GPUs) is constrained to %v, which no node has enough of", v, p.Name, p.GPUs, p.Models)
				break
			}
		}
		// The same list every time.
		again, _ := LoadPods(traceDir, v)
		if !slices.EqualFunc(pods, again, func(a, b TracePod) bool {
			return a.Name == b.Name && a.GPUMilli() == b.GPUMilli() && slices.Equal(a.Models, b.Models)
		}) {
			t.Errorf("%s: derived twice, two lists", v)
		}
	}
}

// TestDeriveVariantRefusesWhatItCannotMake: names it does not know and
// shares it cannot reach are errors that say why.
func TestDeriveVariantRefusesWhatItCannotMake(t *testing.T) {
	def := []TracePod{{Name: "c", CPU: 1000}, {Name: "s", GPUs: 1, Milli: 500}, {Name: "w", GPUs: 1, Milli: 1000}, {Name: "m", GPUs: 4, Milli: 1000}}
	for _, v := range []string{"gpus50", "cpu0", "multigpu100", "gpushare101", "gpuspec20"} {
		if _, err := DeriveVariant(def, nil, v, 1); err == nil {
			t.Errorf("%s: derived, want an error", v)
		}
	}
	if pods, err := DeriveVariant(def, nil, "gpushare100", 1); err != nil || mixOf(pods).share != 100 {
		t.Errorf("gpushare100 from a list with shares: %v, %v", err, mixOf(pods))
	}
}
