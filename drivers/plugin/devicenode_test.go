package plugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestCharDeviceNode(t *testing.T) {
	for name, tc := range map[string]struct {
		devRoot, path string
		major, minor  int64
		want          *cdispec.DeviceNode
	}{
		"host root": {"/", "/dev/nvidia0", 195, 0,
			&cdispec.DeviceNode{Path: "/dev/nvidia0", HostPath: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
		"no root is the host's": {"", "/dev/davinci3", 236, 3,
			&cdispec.DeviceNode{Path: "/dev/davinci3", HostPath: "/dev/davinci3", Type: "c", Major: 236, Minor: 3}},
		"root of a mounted host": {"/host", "/dev/cambricon_dev4", 227, 4,
			&cdispec.DeviceNode{Path: "/dev/cambricon_dev4", HostPath: "/host/dev/cambricon_dev4", Type: "c", Major: 227, Minor: 4}},
		"root with a trailing slash": {"/host/", "/dev/hisi_hdc", 239, 0,
			&cdispec.DeviceNode{Path: "/dev/hisi_hdc", HostPath: "/host/dev/hisi_hdc", Type: "c", Major: 239, Minor: 0}},
		"a folder under /dev": {"/tmp/node", "/dev/infiniband/uverbs2", 231, 194,
			&cdispec.DeviceNode{Path: "/dev/infiniband/uverbs2", HostPath: "/tmp/node/dev/infiniband/uverbs2", Type: "c", Major: 231, Minor: 194}},
		"largest numbers": {"/", "/dev/nvidia-caps/nvidia-cap1048575", 4095, 1048575,
			&cdispec.DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap1048575", HostPath: "/dev/nvidia-caps/nvidia-cap1048575", Type: "c", Major: 4095, Minor: 1048575}},
	} {
		t.Run(name, func(t *testing.T) {
			got := CharDeviceNode(tc.devRoot, tc.path, tc.major, tc.minor)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("node (-want +got):\n%s", diff)
			}
		})
	}
}
