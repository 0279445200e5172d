// Package deployments embeds the cluster objects that installing Strata
// creates (DeviceClasses, CRDs), so that strata-sim and the tests install
// exactly what the Helm chart does.
package deployments

import (
	"embed"
	"io/fs"
	"path"
	"sort"
)

//go:embed deviceclasses/*.yaml crds/*.yaml
var files embed.FS

// CRDs returns the CustomResourceDefinitions by file name.
func CRDs() (map[string][]byte, error) {
	return readDir("crds")
}

// DeviceClasses returns the DeviceClass manifests by file name.
func DeviceClasses() (map[string][]byte, error) {
	return readDir("deviceclasses")
}

func readDir(dir string) (map[string][]byte, error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		raw, err := files.ReadFile(path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out[name] = raw
	}
	return out, nil
}
