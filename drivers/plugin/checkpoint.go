package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/strata-sh/strata/internal/fileutil"
)

// checkpointVersion names the envelope layout. Readers accept only this
// version; a future layout gets a new name and a conversion.
const checkpointVersion = "plugin.strata.sh/checkpoint/v1"

// Phase says how far the prepare of a claim got.
type Phase string

const (
	// PhasePrepareStarted is recorded before the backend touches hardware.
	// A claim found in this phase at start-up was interrupted and is rolled
	// back.
	PhasePrepareStarted Phase = "PrepareStarted"
	// PhasePrepareCompleted is recorded after the CDI spec is on disk.
	PhasePrepareCompleted Phase = "PrepareCompleted"
)

// ClaimState is what the plugin remembers about one claim.
type ClaimState struct {
	ClaimRef `json:",inline"`
	Phase    Phase            `json:"phase"`
	Devices  []PreparedDevice `json:"devices"`
	// Recovered marks a claim rebuilt from the API server after the
	// checkpoint was lost: its devices carry no backend state, and while
	// such a claim is prepared the plugin destroys nothing it cannot tell
	// apart from what the claim uses.
	Recovered bool `json:"recovered,omitempty"`
}

// checkpointData is the checksummed payload.
type checkpointData struct {
	// BootID is the node boot the prepared state belongs to. Prepared
	// devices do not survive a reboot, so state from another boot is void.
	BootID string                    `json:"bootID"`
	Claims map[types.UID]*ClaimState `json:"claims"`
}

// checkpointFile is the on-disk envelope.
type checkpointFile struct {
	Version  string          `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// ErrCorruptCheckpoint is returned when the checkpoint cannot be trusted.
var ErrCorruptCheckpoint = errors.New("corrupt checkpoint")

// ErrUnknownCheckpointVersion is returned for a checkpoint in a layout
// this plugin does not know: written by a newer release (a rollback
// after an upgrade) or by something else. It is not corrupt, and it is
// left as it is.
var ErrUnknownCheckpointVersion = errors.New("checkpoint in an unknown version")

// checkpointStore persists checkpointData in one file with atomic replaces.
type checkpointStore struct {
	path string
	// seen is the checksum of the checkpoint as this process last loaded
	// or saved it, "" for none. Another instance of the plugin that wrote
	// the file since leaves another checksum there.
	seen string
}

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// load reads the checkpoint. A missing file yields empty data. A file that
// does not parse or whose checksum does not match yields
// ErrCorruptCheckpoint; the caller decides how to recover.
func (s *checkpointStore) load() (*checkpointData, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		s.seen = ""
		return &checkpointData{Claims: map[types.UID]*ClaimState{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	var file checkpointFile
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorruptCheckpoint, s.path, err)
	}
	if file.Version != checkpointVersion {
		return nil, fmt.Errorf("%w %s: %q, this plugin reads %q", ErrUnknownCheckpointVersion, s.path, file.Version, checkpointVersion)
	}
	if got := checksum(file.Data); got != file.Checksum {
		return nil, fmt.Errorf("%w %s: checksum mismatch", ErrCorruptCheckpoint, s.path)
	}
	// Lenient decoding: a checkpoint written by a newer plugin may carry
	// fields this one does not know, and must still be usable to clean up.
	data := &checkpointData{}
	if err := json.Unmarshal(file.Data, data); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorruptCheckpoint, s.path, err)
	}
	if data.Claims == nil {
		data.Claims = map[types.UID]*ClaimState{}
	}
	for uid, c := range data.Claims {
		// Recovery looks claims up by their UID and reads their phase.
		if c == nil || c.UID != uid {
			return nil, fmt.Errorf("%w %s: claim entry %q does not describe that claim", ErrCorruptCheckpoint, s.path, uid)
		}
	}
	s.seen = file.Checksum
	return data, nil
}

// changed reports whether the checkpoint on disk is other than the one
// this process last loaded or saved, that is whether another instance of
// the plugin wrote it since. A file that does not parse, or in another
// version, counts as changed: load then reports it.
func (s *checkpointStore) changed() (bool, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s.seen != "", nil
	}
	if err != nil {
		return false, fmt.Errorf("read checkpoint: %w", err)
	}
	var file checkpointFile
	if err := json.Unmarshal(raw, &file); err != nil {
		return true, nil
	}
	return file.Version != checkpointVersion || file.Checksum != s.seen, nil
}

// save replaces the checkpoint atomically and durably: write a temp file,
// fsync it, rename it over the old one, fsync the directory.
func (s *checkpointStore) save(data *checkpointData) error {
	payload, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	sum := checksum(payload)
	raw, err := json.Marshal(checkpointFile{Version: checkpointVersion, Checksum: sum, Data: payload})
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := fileutil.WriteAtomic(s.path, raw); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	s.seen = sum
	return nil
}

// quarantine moves a corrupt checkpoint aside so that it can be inspected
// and returns where it went.
func (s *checkpointStore) quarantine(now time.Time) (string, error) {
	dst := s.path + ".corrupt-" + strings.ReplaceAll(now.UTC().Format("20060102T150405.000"), ".", "")
	if err := os.Rename(s.path, dst); err != nil {
		return "", fmt.Errorf("move corrupt checkpoint aside: %w", err)
	}
	return dst, nil
}

// readBootID returns the node's boot id, or "" if path is empty.
func readBootID(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}
