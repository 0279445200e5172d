package plugin

import (
	"path/filepath"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CharDeviceNode is the CDI device node of a character device: path is
// where the container sees it (absolute, under /dev) and, under devRoot
// ("" means /), where the host has it. It is described fully (type,
// major, minor) so that the runtime need not stat the host to inject it.
func CharDeviceNode(devRoot, path string, major, minor int64) *cdispec.DeviceNode {
	if devRoot == "" {
		devRoot = "/"
	}
	return &cdispec.DeviceNode{
		Path:     path,
		HostPath: filepath.Join(devRoot, path),
		Type:     "c",
		Major:    major,
		Minor:    minor,
	}
}
