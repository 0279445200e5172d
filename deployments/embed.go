// Package deployments embeds the Helm chart that installs Strata
// (deployments/helm/strata), so that strata-sim and the tests install
// exactly what `helm install` does; package chart renders it.
package deployments

import (
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

// ChartDir is the chart's folder in Files.
const ChartDir = "helm/strata"

//go:embed all:helm/strata
var files embed.FS

// Chart returns the chart's files, rooted at the chart folder.
func Chart() fs.FS {
	sub, err := fs.Sub(files, ChartDir)
	if err != nil {
		panic(err) // the folder is embedded above
	}
	return sub
}

// SchedulerConfig returns the KubeSchedulerConfiguration the chart ships
// (before the chart adds leader election and the values' overrides).
func SchedulerConfig() []byte {
	raw, err := fs.ReadFile(Chart(), "files/scheduler-config.yaml")
	if err != nil {
		panic(err) // embedded above
	}
	return raw
}

// DeviceClasses returns the chart's DeviceClass manifests by file name,
// as they are before the chart adds its labels.
func DeviceClasses() (map[string][]byte, error) {
	dir := "files/deviceclasses"
	entries, err := fs.ReadDir(Chart(), dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		raw, err := fs.ReadFile(Chart(), dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		out[e.Name()] = raw
	}
	return out, nil
}

// DeviceClassObjects returns the chart's DeviceClasses decoded strictly
// (an unknown field is an error), in file name order.
func DeviceClassObjects() ([]*resourceapi.DeviceClass, error) {
	files, err := DeviceClasses()
	if err != nil {
		return nil, err
	}
	var out []*resourceapi.DeviceClass
	for _, name := range slices.Sorted(maps.Keys(files)) {
		c := &resourceapi.DeviceClass{}
		if err := yaml.UnmarshalStrict(files[name], c); err != nil {
			return nil, fmt.Errorf("chart DeviceClass %s: %w", name, err)
		}
		out = append(out, c)
	}
	return out, nil
}
