package cdi

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestWriteClaimSpecIsResolvableAndRemovable(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter("gpu.example.com", dir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := w.WriteClaimSpec("uid-1",
		cdispec.ContainerEdits{Env: []string{"SHARED=1"}},
		[]Device{{Name: "gpu-0", Edits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/gpu0", Type: "c", Major: 195}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu.example.com/claim=uid-1-gpu-0"}, ids); diff != "" {
		t.Errorf("IDs (-want +got):\n%s", diff)
	}
	raw, err := os.ReadFile(w.SpecPath("uid-1"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("spec is not JSON: %v", err)
	}
	if spec.Kind != "gpu.example.com/claim" || spec.Version == "" {
		t.Errorf("spec kind %q version %q", spec.Kind, spec.Version)
	}

	// A runtime reading the directory resolves the device.
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if cache.GetDevice(ids[0]) == nil {
		t.Errorf("runtime cannot resolve %s: %v", ids[0], cache.GetErrors())
	}

	if uids, _ := w.ClaimUIDs(); !cmp.Equal(uids, []string{"uid-1"}) {
		t.Errorf("ClaimUIDs = %v", uids)
	}
	if err := w.RemoveClaimSpec("uid-1"); err != nil {
		t.Fatal(err)
	}
	if err := w.RemoveClaimSpec("uid-1"); err != nil {
		t.Errorf("removing a missing spec: %v", err)
	}
	if uids, _ := w.ClaimUIDs(); len(uids) != 0 {
		t.Errorf("ClaimUIDs after removal = %v", uids)
	}
}

func TestWriterIgnoresOtherVendors(t *testing.T) {
	dir := t.TempDir()
	a, _ := NewWriter("a.example.com", dir)
	b, _ := NewWriter("b.example.com", dir)
	edits := cdispec.ContainerEdits{Env: []string{"X=1"}}
	if _, err := a.WriteClaimSpec("uid-a", edits, []Device{{Name: "d", Edits: edits}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteClaimSpec("uid-b", edits, []Device{{Name: "d", Edits: edits}}); err != nil {
		t.Fatal(err)
	}
	if uids, _ := a.ClaimUIDs(); !cmp.Equal(uids, []string{"uid-a"}) {
		t.Errorf("vendor a sees %v", uids)
	}
}

func TestNewWriterRejectsBadVendor(t *testing.T) {
	if _, err := NewWriter("not a vendor!", t.TempDir()); err == nil {
		t.Error("invalid vendor accepted")
	}
}
