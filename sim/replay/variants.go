package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// Derived variants: pod lists beyond the published ones, made from the
// default pod list the way the trace's description says each published
// variant is made from it, and checked against the published ones
// (TestDerivedVariantsMatchThePublishedOnes):
//
//   - cpuNNN: every GPU pod of default, and CPU-only pods drawn from
//     default's until they are NNN/10 % of the pods.
//   - gpushareNN: default's CPU-only pods, and as many GPU pods as default
//     has, drawn from default's GPU-sharing pods and from its other GPU
//     pods in the numbers that make the sharing pods carry NN % of the GPU
//     request.
//   - multigpuNN: default's pods, and multi-GPU pods drawn from default's
//     and added until they carry NN % of the GPU request.
//
// A draw of k pods of a kind takes each of default's pods of that kind
// once per whole k/n and the rest at random without replacement.
//   - gpuspecNN: default's pods, with GPU pods picked at random given a
//     GPU model constraint (gpu_spec) until the constrained pods carry
//     NN % of the GPU request. Each constraint is drawn from the
//     constrained pods of the published gpuspec variants of the same kind
//     (a share of a GPU, one whole GPU, several), so that only
//     combinations the trace has are made.
//
// The draws use DeriveSeed: every run of a derived variant replays the
// same pod list.

// DeriveSeed seeds the draws of derived variants.
const DeriveSeed = 20230710

// BeyondVariants are the derived variants the benchmarks report: beyond
// the published ranges in each direction.
var BeyondVariants = []string{"cpu250", "gpuspec25", "gpuspec33", "gpushare80", "gpushare100", "multigpu40", "multigpu50"}

var variantName = regexp.MustCompile(`^(cpu|gpushare|multigpu|gpuspec)([0-9]+)$`)

// LoadPods reads a variant's pod list from the trace folder, or derives
// it from the folder's default list when the folder has no file of that
// name and the name is one DeriveVariant makes.
func LoadPods(traceDir, variant string) ([]TracePod, error) {
	path := filepath.Join(traceDir, "openb_pod_list_"+variant+".csv")
	if _, err := os.Stat(path); err == nil || !variantName.MatchString(variant) {
		return ReadPods(path)
	}
	def, err := ReadPods(filepath.Join(traceDir, "openb_pod_list_default.csv"))
	if err != nil {
		return nil, fmt.Errorf("variant %s is derived from default: %w", variant, err)
	}
	var constrained []TracePod
	if m := variantName.FindStringSubmatch(variant); m[1] == "gpuspec" {
		files, _ := filepath.Glob(filepath.Join(traceDir, "openb_pod_list_gpuspec*.csv"))
		for _, f := range files {
			pods, err := ReadPods(f)
			if err != nil {
				return nil, err
			}
			for _, p := range pods {
				if len(p.Models) > 0 {
					constrained = append(constrained, p)
				}
			}
		}
	}
	return DeriveVariant(def, constrained, variant, DeriveSeed)
}

// podKind sorts pods as the trace's description counts them.
type podKind int

const (
	cpuOnly podKind = iota
	gpuShare
	wholeGPU
	multiGPU
)

func kindOf(p TracePod) podKind {
	switch {
	case p.GPUs == 0:
		return cpuOnly
	case p.GPUs > 1:
		return multiGPU
	case p.Milli < 1000:
		return gpuShare
	}
	return wholeGPU
}

// DeriveVariant makes the named variant from the default pod list.
// constrained are pods that carry a GPU model constraint, the source of
// the constraints of a gpuspec variant.
func DeriveVariant(def, constrained []TracePod, variant string, seed uint64) ([]TracePod, error) {
	m := variantName.FindStringSubmatch(variant)
	if m == nil {
		return nil, fmt.Errorf("variant %q: not cpuNNN, gpushareNN, multigpuNN or gpuspecNN", variant)
	}
	n, _ := strconv.Atoi(m[2])
	share := float64(n) / 100
	if m[1] == "cpu" {
		share = float64(n) / 1000
	}
	limit := 1.0
	if m[1] != "gpushare" && m[1] != "gpuspec" {
		limit = 0.95 // a list of nothing but the added kind has no mix left
	}
	if share <= 0 || share > limit {
		return nil, fmt.Errorf("variant %q: the share %.3g is not within (0, %.3g]", variant, share, limit)
	}
	byKind := map[podKind][]TracePod{}
	for _, p := range def {
		byKind[kindOf(p)] = append(byKind[kindOf(p)], p)
	}
	rng := rand.New(rand.NewPCG(seed, 0xd0e5))
	draw := func(from []TracePod) TracePod { return from[rng.IntN(len(from))] }
	// drawMany takes k pods of from: every pod once per whole k/len(from)
	// and the rest without replacement, which keeps the mix inside a kind
	// closer to default's than k independent draws.
	drawMany := func(from []TracePod, k int) []TracePod {
		var out []TracePod
		for k > 0 {
			perm := rng.Perm(len(from))
			for _, i := range perm[:min(k, len(perm))] {
				out = append(out, from[i])
			}
			k -= len(perm)
		}
		return out
	}
	var out []TracePod
	add := func(p TracePod) {
		p.Name = fmt.Sprintf("%s-%05d", variant, len(out))
		out = append(out, p)
	}
	gpuPods := len(def) - len(byKind[cpuOnly])
	switch m[1] {
	case "cpu":
		if len(byKind[cpuOnly]) == 0 {
			return nil, fmt.Errorf("variant %q: the default list has no CPU-only pods", variant)
		}
		for _, p := range def {
			if kindOf(p) != cpuOnly {
				add(p)
			}
		}
		for _, p := range drawMany(byKind[cpuOnly], int(math.Round(share*float64(gpuPods)/(1-share)))) {
			add(p)
		}
	case "gpushare":
		shares := byKind[gpuShare]
		others := append(append([]TracePod(nil), byKind[wholeGPU]...), byKind[multiGPU]...)
		if len(shares) == 0 || (share < 1 && len(others) == 0) {
			return nil, fmt.Errorf("variant %q: the default list lacks sharing or whole-GPU pods", variant)
		}
		ms, mo := meanMilli(shares), meanMilli(others)
		// s sharing pods of ms each carry share of s*ms + (N-s)*mo.
		s := gpuPods
		if share < 1 {
			s = int(math.Round(share * mo * float64(gpuPods) / ((1-share)*ms + share*mo)))
		}
		for _, p := range byKind[cpuOnly] {
			add(p)
		}
		for _, p := range drawMany(shares, s) {
			add(p)
		}
		for _, p := range drawMany(others, gpuPods-s) {
			add(p)
		}
	case "multigpu":
		if len(byKind[multiGPU]) == 0 {
			return nil, fmt.Errorf("variant %q: the default list has no multi-GPU pods", variant)
		}
		var multi, total int64
		for _, p := range def {
			add(p)
			total += p.GPUMilli()
			if kindOf(p) == multiGPU {
				multi += p.GPUMilli()
			}
		}
		for float64(multi) < share*float64(total) {
			for _, p := range drawMany(byKind[multiGPU], len(byKind[multiGPU])) {
				if float64(multi) >= share*float64(total) {
					break
				}
				add(p)
				multi += p.GPUMilli()
				total += p.GPUMilli()
			}
		}
	case "gpuspec":
		source := map[podKind][]TracePod{}
		for _, p := range constrained {
			if len(p.Models) > 0 && p.GPUs > 0 {
				source[kindOf(p)] = append(source[kindOf(p)], p)
			}
		}
		if len(constrained) == 0 {
			return nil, fmt.Errorf("variant %q: no pods with a GPU model constraint to draw constraints from (the published gpuspec lists)", variant)
		}
		var total, pinned int64
		var free []int
		for _, p := range def {
			add(p)
			out[len(out)-1].Models = nil
			total += p.GPUMilli()
			if p.GPUs > 0 {
				free = append(free, len(out)-1)
			}
		}
		rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
		for _, i := range free {
			if float64(pinned) >= share*float64(total) {
				break
			}
			from := source[kindOf(out[i])]
			if len(from) == 0 {
				continue // no constraint of this kind in the trace
			}
			out[i].Models = draw(from).Models
			pinned += out[i].GPUMilli()
		}
		if float64(pinned) < share*float64(total)-1000 {
			return nil, fmt.Errorf("variant %q: constraints of the trace's kinds cover %.1f %% of the GPU request at most", variant, 100*float64(pinned)/float64(total))
		}
	}
	return out, nil
}

func meanMilli(pods []TracePod) float64 {
	var sum int64
	for _, p := range pods {
		sum += p.GPUMilli()
	}
	return float64(sum) / float64(len(pods))
}
