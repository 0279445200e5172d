// Package cdi writes the Container Device Interface specs that Strata's
// kubelet plugins hand to the container runtime.
//
// Every prepared ResourceClaim gets exactly one transient spec file, named
// after the driver and the claim UID. The file is written atomically (temp
// file + rename, done by the CDI library) so that a runtime never reads half
// a spec, and it is removed again when the claim is unprepared. Device names
// inside the spec embed the claim UID, so a runtime's CDI cache never
// confuses a device of an old claim with one of a new claim.
package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Class is the CDI device class used for all per-claim devices.
const Class = "claim"

// specExt is the encoding of the spec files. JSON is cheaper to write and
// read than YAML and every CDI consumer understands it.
const specExt = ".json"

// Device is one CDI device of a claim: a DRA device name plus the edits the
// runtime applies to a container that uses it.
type Device struct {
	// Name is the DRA device name; the CDI device name is derived from it.
	Name string
	// Edits are applied to every container that requests the device.
	Edits cdispec.ContainerEdits
}

// Writer manages the transient CDI specs of one driver in one directory.
type Writer struct {
	vendor string
	dir    string
	cache  *cdiapi.Cache
}

// NewWriter returns a Writer for the vendor (normally the DRA driver name)
// that keeps its specs in dir. The directory is created if needed.
func NewWriter(vendor, dir string) (*Writer, error) {
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("CDI vendor %q: %w", vendor, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create CDI spec directory: %w", err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("open CDI spec directory %s: %w", dir, err)
	}
	return &Writer{vendor: vendor, dir: dir, cache: cache}, nil
}

// Dir returns the directory the specs are written to.
func (w *Writer) Dir() string { return w.dir }

// Kind returns the CDI kind ("vendor/class") of every device this Writer emits.
func (w *Writer) Kind() string { return w.vendor + "/" + Class }

// DeviceID returns the fully qualified CDI device ID of a DRA device of a claim.
func (w *Writer) DeviceID(claimUID, device string) string {
	return parser.QualifiedName(w.vendor, Class, deviceName(claimUID, device))
}

func deviceName(claimUID, device string) string {
	return claimUID + "-" + device
}

func (w *Writer) specName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(w.vendor, Class, claimUID) + specExt
}

// SpecPath returns where the spec of a claim lives (whether or not it exists).
func (w *Writer) SpecPath(claimUID string) string {
	return filepath.Join(w.dir, w.specName(claimUID))
}

// WriteClaimSpec writes (or replaces) the spec of one claim. common edits
// apply to every container that uses any device of the claim. It returns the
// qualified CDI device IDs in the order of devices.
func (w *Writer) WriteClaimSpec(claimUID string, common cdispec.ContainerEdits, devices []Device) ([]string, error) {
	spec := &cdispec.Spec{
		Kind:           w.Kind(),
		ContainerEdits: common,
	}
	ids := make([]string, 0, len(devices))
	for _, d := range devices {
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           deviceName(claimUID, d.Name),
			ContainerEdits: d.Edits,
		})
		ids = append(ids, w.DeviceID(claimUID, d.Name))
	}
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version for claim %s: %w", claimUID, err)
	}
	spec.Version = version
	if err := w.cache.WriteSpec(spec, w.specName(claimUID)); err != nil {
		return nil, fmt.Errorf("write CDI spec for claim %s: %w", claimUID, err)
	}
	return ids, nil
}

// RemoveClaimSpec deletes the spec of a claim. A missing spec is not an error.
func (w *Writer) RemoveClaimSpec(claimUID string) error {
	if err := w.cache.RemoveSpec(w.specName(claimUID)); err != nil {
		return fmt.Errorf("remove CDI spec for claim %s: %w", claimUID, err)
	}
	return nil
}

// ClaimUIDs lists the claims that have a spec of this Writer's vendor on
// disk, sorted. Start-up uses it to find specs that no checkpoint owns.
func (w *Writer) ClaimUIDs() ([]string, error) {
	entries, err := os.ReadDir(w.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	prefix := cdiapi.GenerateTransientSpecName(w.vendor, Class, "")
	var uids []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, specExt) {
			continue
		}
		uids = append(uids, strings.TrimSuffix(strings.TrimPrefix(name, prefix), specExt))
	}
	sort.Strings(uids)
	return uids, nil
}
