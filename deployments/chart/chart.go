// Package chart renders Strata's Helm chart with Helm's own Go SDK, the
// way `helm install` (or `helm template`) does: values are merged over
// the chart's defaults, checked against values.schema.json, and the
// templates rendered. strata-sim installs what it renders, so every
// simulated cluster runs the chart's RBAC, policies and configuration.
package chart

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/deployments"
)

// Release names the installation, as `helm install NAME -n NAMESPACE`.
type Release struct {
	Name      string
	Namespace string
	// KubeVersion is the cluster's version, as helm install reads it from
	// the API server; empty means DefaultKubeVersion.
	KubeVersion string
}

// DefaultKubeVersion is the Kubernetes version Strata is built on, the
// version strata-sim runs.
const DefaultKubeVersion = "v1.37.2"

// DefaultRelease is the installation the README's commands make.
var DefaultRelease = Release{Name: "strata", Namespace: "strata-system"}

// Manifest is one rendered file.
type Manifest struct {
	// Name is the file's path in the chart, e.g. "templates/plugins.yaml".
	Name    string
	Content []byte
}

// Rendered is an installation's objects: CRDs first (Helm installs the
// crds/ folder before anything else), then the templates in file order.
type Rendered struct {
	Release   Release
	CRDs      []Manifest
	Templates []Manifest
}

// All returns the CRDs followed by the templates.
func (r *Rendered) All() []Manifest {
	return append(append([]Manifest(nil), r.CRDs...), r.Templates...)
}

// Load reads the embedded chart.
func Load() (*chartv2.Chart, error) {
	return LoadFS(deployments.Chart())
}

// LoadFS reads a chart from a file system rooted at the chart folder.
func LoadFS(fsys fs.FS) (*chartv2.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: name, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read chart: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	return c, nil
}

// ParseValues reads a values file (YAML), as `helm install -f FILE`.
func ParseValues(raw []byte) (map[string]any, error) {
	values := map[string]any{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("parse values: %w", err)
	}
	return values, nil
}

// ReadValuesFiles reads values files and merges them, later files over
// earlier ones, as `helm install -f A -f B` does.
func ReadValuesFiles(paths []string) (map[string]any, error) {
	out := map[string]any{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		values, err := ParseValues(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = loader.MergeMaps(out, values)
	}
	return out, nil
}

// Render renders the embedded chart for rel with values over the
// defaults. A value that values.schema.json refuses is an error that
// names it.
func Render(rel Release, values map[string]any) (*Rendered, error) {
	c, err := Load()
	if err != nil {
		return nil, err
	}
	return RenderChart(c, rel, values)
}

// RenderChart renders c for rel with values over its defaults.
func RenderChart(c *chartv2.Chart, rel Release, values map[string]any) (*Rendered, error) {
	if values == nil {
		values = map[string]any{}
	}
	opts := common.ReleaseOptions{Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true}
	version := rel.KubeVersion
	if version == "" {
		version = DefaultKubeVersion
	}
	kube, err := common.ParseKubeVersion(version)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version: %w", err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kube
	vals, err := chartutil.ToRenderValues(c, values, opts, caps)
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	r := &Rendered{Release: rel}
	prefix := c.Name() + "/"
	for name, content := range out {
		name = strings.TrimPrefix(name, prefix)
		// Partials (_helpers.tpl) and NOTES.txt are not manifests.
		if strings.HasPrefix(path.Base(name), "_") || path.Ext(name) != ".yaml" || strings.TrimSpace(content) == "" {
			continue
		}
		r.Templates = append(r.Templates, Manifest{Name: name, Content: []byte(content)})
	}
	sort.Slice(r.Templates, func(i, j int) bool { return r.Templates[i].Name < r.Templates[j].Name })
	for _, f := range c.CRDs() {
		r.CRDs = append(r.CRDs, Manifest{Name: f.Name, Content: f.Data})
	}
	sort.Slice(r.CRDs, func(i, j int) bool { return r.CRDs[i].Name < r.CRDs[j].Name })
	return r, nil
}
