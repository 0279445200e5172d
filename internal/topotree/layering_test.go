package topotree

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/strata-sh/strata/"

// TestSharedPackagesImportNoSchedulerPlugin: the controller (its
// admission webhook included), the gang-annotation parser and this tree
// import no package under scheduler-plugins/, directly or through another
// of the module's packages. What they share with the scheduler sits in a
// neutral package such as this one, so a plugin's internals never ride
// into the controller binary. Tests are not counted.
func TestSharedPackagesImportNoSchedulerPlugin(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// via records, for each module package reached, the package it was
	// reached from, so that a failure shows the chain.
	via := map[string]string{}
	var visit func(path, from string)
	visit = func(path, from string) {
		if _, seen := via[path]; seen {
			return
		}
		via[path] = from
		pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, module) {
				visit(imp, path)
			}
		}
	}
	for _, top := range []string{"controller", "internal/gangspec", "internal/topotree"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(dir string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || d.Name() == "testdata" {
				return err
			}
			if _, err := build.ImportDir(dir, 0); err != nil {
				return nil // no Go files of its own
			}
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return err
			}
			visit(module+filepath.ToSlash(rel), "")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := via[module+"controller/admission"]; !ok {
		t.Fatalf("the walk missed controller/admission; reached %d packages", len(via))
	}
	for path := range via {
		// The first plugin package of each chain is enough.
		if !strings.HasPrefix(path, module+"scheduler-plugins/") || strings.HasPrefix(via[path], module+"scheduler-plugins/") {
			continue
		}
		chain := []string{path}
		for p := via[path]; p != ""; p = via[p] {
			chain = append([]string{p}, chain...)
		}
		t.Errorf("a shared package imports a scheduler plugin: %s", strings.Join(chain, " -> "))
	}
}
