package testutil

import (
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// GPULayout maps each NVIDIA device of the given slices ("<pool>/<device>")
// to where it sits on its GPU, for GPUOverCommits.
type GPULayout map[string]GPUPlace

// GPUPlace is where a published NVIDIA device sits.
type GPUPlace struct {
	// GPU is "<pool>/gpu-N".
	GPU string
	// MIG is set for a MIG device, with its memory slices.
	MIG         bool
	Start, Size int64
	// Memory is a whole GPU's memory capacity in bytes.
	Memory int64
}

// NVIDIALayout reads the layout of the "gpu" and "mig" devices of driver
// in slices.
func NVIDIALayout(slices []resourceapi.ResourceSlice, driver string) GPULayout {
	out := GPULayout{}
	for _, s := range slices {
		if s.Spec.Driver != driver {
			continue
		}
		for _, d := range s.Spec.Devices {
			typ := d.Attributes["type"].StringValue
			if typ == nil {
				continue
			}
			p := GPUPlace{GPU: s.Spec.Pool.Name + "/" + strings.SplitN(d.Name, "-mig-", 2)[0]}
			switch *typ {
			case "mig":
				p.MIG = true
				p.Start, p.Size = intAttribute(d, "placementStart"), intAttribute(d, "placementSize")
			case "gpu":
				m := d.Capacity["memory"].Value
				p.Memory = m.Value()
			default:
				continue
			}
			out[s.Spec.Pool.Name+"/"+d.Name] = p
		}
	}
	return out
}

func intAttribute(d resourceapi.Device, name string) int64 {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

// GPUOverCommits lists how the allocated claims over-commit a GPU of the
// layout: a whole GPU beside anything else on it, overlapping MIG
// placements, shares past the GPU's cores or memory. Results on devices
// the layout does not know are reported too.
func GPUOverCommits(layout GPULayout, claims []resourceapi.ResourceClaim) []string {
	type use struct {
		claims        int
		cores, memory int64
		capacity      int64
		slices        map[int64]string
	}
	var problems []string
	uses := map[string]*use{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			p, ok := layout[r.Pool+"/"+r.Device]
			if !ok {
				problems = append(problems, fmt.Sprintf("claim %s got unknown device %s/%s", c.Name, r.Pool, r.Device))
				continue
			}
			u := uses[p.GPU]
			if u == nil {
				u = &use{slices: map[int64]string{}}
				uses[p.GPU] = u
			}
			if p.MIG {
				for s := p.Start; s < p.Start+p.Size; s++ {
					if other, taken := u.slices[s]; taken {
						problems = append(problems, fmt.Sprintf("%s memory slice %d given to %s and %s", p.GPU, s, other, c.Name))
					}
					u.slices[s] = c.Name
				}
				continue
			}
			// Whole GPUs consume all the memory, shares part of it;
			// reserved cores never add up past 100.
			u.claims++
			cores, memory := r.ConsumedCapacity["cores"], r.ConsumedCapacity["memory"]
			u.cores += cores.Value()
			u.memory += memory.Value()
			u.capacity = p.Memory
		}
	}
	gpus := make([]string, 0, len(uses))
	for gpu := range uses {
		gpus = append(gpus, gpu)
	}
	sort.Strings(gpus)
	for _, gpu := range gpus {
		u := uses[gpu]
		if u.cores > 100 || u.memory > u.capacity || (u.claims > 0 && len(u.slices) > 0) {
			problems = append(problems, fmt.Sprintf("%s double-allocated: %d claims on the GPU (%d cores, %d of %d bytes), %d MIG slices", gpu, u.claims, u.cores, u.memory, u.capacity, len(u.slices)))
		}
	}
	return problems
}
