package ascend

import (
	"fmt"
	"strings"
)

// family is the chip family published as accelerator.strata.sh/model:
// 910B for 910B1-910B4, 910A for the first 910 generation (910A,
// 910ProA, 910ProB, 910PremiumA), else the name as npu-smi prints it.
func family(name string) string {
	n := strings.TrimPrefix(strings.TrimSpace(name), "Ascend")
	switch {
	case strings.HasPrefix(n, "910B"):
		return "910B"
	case strings.HasPrefix(n, "910C"):
		return "910C"
	case strings.HasPrefix(n, "910"):
		return "910A"
	}
	return n
}

// assignHCCSGroups gives each chip the ids of the HCCS groups it belongs
// to, published as accelerator.strata.sh/partition<size> so that a claim
// for N chips of one group uses matchAttribute on partition<N>.
//
//   - 910A (Atlas 800 training servers): two HCCS rings of four chips,
//     physical ids 0-3 and 4-7; a job of up to four chips stays in one
//     ring, eight take both.
//   - 910B (Atlas 800T A2): eight chips fully meshed by HCCS; jobs take
//     1, 2, 4 or 8 chips, aligned as the scheduler's partition rules have
//     them: pairs {0,1}, {2,3}, ..., halves {0-3} and {4-7}, and all.
//
// Other families get no groups: the plugin does not guess a topology it
// does not know.
func assignHCCSGroups(npus []*npu) {
	for _, n := range npus {
		n.groups = map[int]string{}
		switch n.family {
		case "910A":
			n.groups[4] = fmt.Sprintf("hccs-ring-%d", n.PhyID/4)
			n.groups[8] = "hccs-all"
		case "910B":
			n.groups[2] = fmt.Sprintf("hccs-pair-%d", n.PhyID/2)
			n.groups[4] = fmt.Sprintf("hccs-half-%d", n.PhyID/4)
			n.groups[8] = "hccs-all"
		}
	}
}
