package hardware

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/strata-sh/strata/"

// TestFakesImportNoDriver: no package under hardware/, directly or
// through another of the module's packages, imports one under drivers/.
// A fake that shares code with the backend it stands in for could agree
// with its bugs; what they must share (the vendor-tool runner, the link
// interface) sits in internal/. Tests are not counted: contract tests
// hold a fake and its parser to the same capture on purpose.
func TestFakesImportNoDriver(t *testing.T) {
	root, err := filepath.Abs("..")
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
	err = filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		if _, err := build.ImportDir(dir, 0); err != nil {
			return nil // no Go files of its own
		}
		visit(module+filepath.ToSlash(filepath.Join("hardware", dir)), "")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path := range via {
		// The first driver package of each chain is enough.
		if !strings.HasPrefix(path, module+"drivers/") || strings.HasPrefix(via[path], module+"drivers/") {
			continue
		}
		chain := []string{path}
		for p := via[path]; p != ""; p = via[p] {
			chain = append([]string{p}, chain...)
		}
		t.Errorf("a fake imports a driver package: %s", strings.Join(chain, " -> "))
	}
}
