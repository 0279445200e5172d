package node

import (
	"fmt"
	"sort"
	"sync"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// Container is what one container of a pod was given by its claims, as
// the container runtime injected it from the CDI specs.
type Container struct {
	// CDIDevices are the fully qualified CDI device IDs.
	CDIDevices []string `json:"cdiDevices"`
	// DeviceNodes are the container paths of injected device nodes.
	DeviceNodes []string `json:"deviceNodes,omitempty"`
	// Env is the environment added by the CDI edits.
	Env []string `json:"env,omitempty"`
	// Mounts are the container paths of injected mounts.
	Mounts []string `json:"mounts,omitempty"`
	// NetDevices are the host network interfaces moved into the
	// container, as "<host name>=<name in the container>".
	NetDevices []string `json:"netDevices,omitempty"`
	// Observed says the container itself reported these (a pod on a real
	// node prints what it has): device nodes, environment and mounts are
	// then all it has beyond what every container has, and CDIDevices is
	// empty.
	Observed bool `json:"observed,omitempty"`
}

// containerRuntime stands in for containerd's CDI support: it reads the
// node's CDI spec directory and applies the edits of the requested devices
// to a container's OCI spec.
type containerRuntime struct {
	mu    sync.Mutex
	cache *cdiapi.Cache
}

func newContainerRuntime(dir string) (*containerRuntime, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("open CDI spec directory %s: %w", dir, err)
	}
	return &containerRuntime{cache: cache}, nil
}

// inject resolves the devices and returns what they add to a container.
// An ID that no spec on disk defines is an error, as it is for containerd.
func (r *containerRuntime) inject(ids []string) (Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Specs are written per claim just before this call; reread the
	// directory, as a runtime does on a cache miss. Errors about other
	// specs (one removed while the directory is read, say) do not matter
	// here: a device this container needs and cannot find is reported by
	// the injection below.
	_ = r.cache.Refresh()
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := r.cache.InjectDevices(spec, ids...); err != nil {
		if len(unresolved) > 0 {
			return Container{}, fmt.Errorf("unresolvable CDI devices %v: %w", unresolved, err)
		}
		return Container{}, fmt.Errorf("inject CDI devices: %w", err)
	}
	c := Container{CDIDevices: append([]string(nil), ids...), Env: spec.Process.Env}
	for _, d := range spec.Linux.Devices {
		c.DeviceNodes = append(c.DeviceNodes, d.Path)
	}
	for _, m := range spec.Mounts {
		c.Mounts = append(c.Mounts, m.Destination)
	}
	for host, d := range spec.Linux.NetDevices {
		c.NetDevices = append(c.NetDevices, host+"="+d.Name)
	}
	sort.Strings(c.CDIDevices)
	sort.Strings(c.DeviceNodes)
	sort.Strings(c.Env)
	sort.Strings(c.Mounts)
	sort.Strings(c.NetDevices)
	return c, nil
}
