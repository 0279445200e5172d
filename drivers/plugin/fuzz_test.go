package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// seedCheckpoint is what a plugin that prepared two claims, one of them
// interrupted, leaves on disk.
func seedCheckpoint() *checkpointData {
	share := types.UID("b1a0e1c2-0000-4000-8000-000000000002")
	return &checkpointData{BootID: "5f3c1c52-7a7e-4d0e-9a55-0d4c3c3f1a11", Claims: map[types.UID]*ClaimState{
		"uid-a": {ClaimRef: ClaimRef{Namespace: "default", Name: "train", UID: "uid-a"}, Phase: PhasePrepareCompleted,
			Devices: []PreparedDevice{{Request: "gpus", Pool: "node-1", Device: "gpu-0",
				Edits: cdispec.ContainerEdits{
					Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
					DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
					Mounts:      []*cdispec.Mount{{HostPath: "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: []string{"ro", "bind"}}},
				},
				State:            json.RawMessage(`{"kind":"mig","gpuInstance":3,"computeInstance":0,"created":true}`),
				ConsumedCapacity: map[resourceapi.QualifiedName]string{"memory": "20Gi"}}}},
		"uid-b": {ClaimRef: ClaimRef{Namespace: "ml", Name: "infer", UID: "uid-b"}, Phase: PhasePrepareStarted, Recovered: true,
			Devices: []PreparedDevice{{Request: "npu/small", Pool: "node-1", Device: "npu-3", ShareID: ptr.To(share), AdminAccess: true}}},
	}}
}

// FuzzCheckpointLoad: a checkpoint file of any content either loads, or
// fails as corrupt or of an unknown version; one that loads holds only
// claims the plugin can act on, and saving it and loading it again gives
// the same state. With wrap, the input is the payload of an envelope
// whose checksum matches, so the decoding of the payload is reached.
func FuzzCheckpointLoad(f *testing.F) {
	dir := f.TempDir()
	seed := &checkpointStore{path: filepath.Join(dir, "seed.json")}
	if err := seed.save(seedCheckpoint()); err != nil {
		f.Fatal(err)
	}
	raw, err := os.ReadFile(seed.path)
	if err != nil {
		f.Fatal(err)
	}
	payload, _ := json.Marshal(seedCheckpoint())
	f.Add(raw, false)
	f.Add(payload, true)
	f.Add([]byte(`{"bootID":"","claims":{}}`), true)
	f.Add([]byte(`{"version":"plugin.strata.sh/checkpoint/v2","checksum":"","data":{}}`), false)

	f.Fuzz(func(t *testing.T, in []byte, wrap bool) {
		if wrap {
			var err error
			in, err = json.Marshal(checkpointFile{Version: checkpointVersion, Checksum: checksum(in), Data: in})
			if err != nil {
				return // not JSON: json.RawMessage refuses to embed it
			}
		}
		dir := t.TempDir()
		store := &checkpointStore{path: filepath.Join(dir, "checkpoint.json")}
		if err := os.WriteFile(store.path, in, 0o600); err != nil {
			t.Fatal(err)
		}
		data, err := store.load()
		if err != nil {
			if !errors.Is(err, ErrCorruptCheckpoint) && !errors.Is(err, ErrUnknownCheckpointVersion) {
				t.Fatalf("load failed neither as corrupt nor as unknown version: %v", err)
			}
			return
		}
		checkClaims(t, data)
		if store.seen == "" {
			t.Error("a loaded checkpoint leaves no checksum to tell another writer's by")
		}
		if changed, err := store.changed(); err != nil || changed {
			t.Errorf("checkpoint just loaded reads as changed (%v, %v)", changed, err)
		}

		if err := store.save(data); err != nil {
			t.Fatalf("save of a loaded checkpoint: %v", err)
		}
		again, err := store.load()
		if err != nil {
			t.Fatalf("load of a saved checkpoint: %v", err)
		}
		first, _ := json.Marshal(data)
		second, _ := json.Marshal(again)
		if !bytes.Equal(first, second) {
			t.Errorf("checkpoint changed on save and load:\n%s\n%s", first, second)
		}
		if err := store.save(again); err != nil {
			t.Fatal(err)
		}
		third, err := store.load()
		if err != nil || !reflect.DeepEqual(again, third) {
			t.Errorf("second save and load is not a fixed point: %v\n%+v\n%+v", err, again, third)
		}
	})
}

// checkClaims asserts what start-up and prepare rely on of a loaded
// checkpoint: every claim present (recoverLocked reads claim.Phase) and
// kept under its own UID (rollbackLocked deletes it by st.UID).
func checkClaims(t *testing.T, data *checkpointData) {
	t.Helper()
	if data.Claims == nil {
		t.Fatal("loaded checkpoint has a nil claims map")
	}
	for uid, st := range data.Claims {
		if st == nil {
			t.Fatalf("loaded checkpoint holds claim %q as null", uid)
		}
		if st.UID != uid {
			t.Errorf("loaded checkpoint holds claim %q under key %q", st.UID, uid)
		}
	}
}

// FuzzLedgerDecode: a ledger file of any content, read in either layout,
// either decodes or fails as corrupt or of an unknown version; one that
// decodes is written and read back the same, and writing that again
// gives the same bytes. Seeded with what the vNPU (list) and sMLU
// (object) backends write.
func FuzzLedgerDecode(f *testing.F) {
	for _, seed := range []string{string(listSeed), "null", "[]", string(objectSeed), "{}", `{"version":"v2"}`, `{"instances":[],"smluOn":[]}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		roundTrip(t, &LedgerFile[listEntry, NoLedgerExtra]{list: true}, in)
		roundTrip(t, &LedgerFile[objectEntry, objectExtra]{}, in)
	})
}

func roundTrip[T LedgerInstance, X any](t *testing.T, f *LedgerFile[T, X], in []byte) {
	t.Helper()
	l, err := f.decode(in)
	if err != nil {
		if !errors.Is(err, ErrCorruptLedger) && !errors.Is(err, ErrUnknownLedgerVersion) {
			t.Fatalf("decode failed neither as corrupt nor as unknown version: %v", err)
		}
		return
	}
	first, err := f.encode(l)
	if err != nil {
		t.Fatalf("encode a ledger that decoded: %v", err)
	}
	again, err := f.decode(first)
	if err != nil {
		t.Fatalf("decode a ledger just encoded (%s): %v", first, err)
	}
	if diff := cmp.Diff(l, again, cmpopts.IgnoreUnexported(Ledger[T, X]{}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ledger changed on encode and decode (-first +second):\n%s", diff)
	}
	second, err := f.encode(again)
	if err != nil || !bytes.Equal(first, second) {
		t.Errorf("second encode is not a fixed point (%v):\n%s\n%s", err, first, second)
	}
}
