package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/apimachinery/pkg/types"

	"github.com/strata-sh/strata/internal/fileutil"
)

// A backend that makes hardware instances for claims (partitions such as
// vNPUs or sMLUs) records each one in a ledger before the vendor tool
// makes it. The ledger, not the checkpoint, is what says which instances
// are the plugin's: an instance it does not hold is an operator's and is
// never destroyed, and one it holds for a claim that is not prepared was
// left by a crash mid-prepare (or by a claim unprepared while the plugin
// was down) and is destroyed at start-up.
//
// A ledger that cannot be read is never taken for an empty one, which
// would leave the plugin's instances unowned, nor overwritten: every
// operation on it fails, so that nothing is made or destroyed until an
// operator repairs it or a release that reads it runs. Unlike a corrupt
// checkpoint, it cannot be rebuilt from the API server: which instance a
// claim got is known only to the ledger.

// ErrCorruptLedger is returned for a ledger file that does not decode.
var ErrCorruptLedger = errors.New("corrupt instance ledger")

// ErrUnknownLedgerVersion is returned for a ledger in a layout this
// plugin does not know. Today's layout has no version: it is version 1
// by definition, and a later layout must say its version in a "version"
// member of a JSON object, which every ledger this release reads lacks.
var ErrUnknownLedgerVersion = errors.New("instance ledger in an unknown version")

// unreadableLedger is the error of a ledger file that does not decode:
// it names the file, and wraps ErrCorruptLedger or
// ErrUnknownLedgerVersion. The driver finds it in what a backend returns
// at start-up and refuses to serve with a reason of its own.
type unreadableLedger struct {
	path string
	err  error
}

func (e *unreadableLedger) Error() string { return e.path + ": " + e.err.Error() }
func (e *unreadableLedger) Unwrap() error { return e.err }

// LedgerInstance is an entry of a ledger: one instance a backend made.
type LedgerInstance interface {
	// ClaimUID is the UID of the claim the instance was made for.
	ClaimUID() types.UID
}

// NoLedgerExtra is the Extra of a ledger that holds instances only.
type NoLedgerExtra struct{}

// Ledger is what a ledger file holds: the instances, in the order they
// were made, and the backend's own bookkeeping beside them.
type Ledger[T LedgerInstance, X any] struct {
	Instances []T
	// Extra is state the backend keeps with its instances, such as the
	// devices whose mode it switched on to make them. It is encoded as
	// the members of the ledger's JSON object beside "instances", so its
	// JSON names must not be "instances" or "version".
	Extra X

	// raw is the encoding as loaded or last saved: a save that would not
	// change it writes nothing.
	raw []byte
}

// LedgerFile stores a ledger in one file, replaced atomically. It holds
// no lock: the backend serializes its operations, and instances of the
// plugin that share the file during a rolling update hold the plugin's
// lock around them.
type LedgerFile[T LedgerInstance, X any] struct {
	path string
	// list is the layout of a ledger that is a bare JSON array of its
	// instances, with no room for Extra. A backend whose ledger has
	// always been one keeps it: an older release reading the file during
	// a rolling update or after a rollback must still understand it.
	list bool
}

// NewLedgerFile is a ledger stored at path as a JSON object: the
// instances under "instances" (left out when there are none) and the
// members of Extra beside them.
func NewLedgerFile[T LedgerInstance, X any](path string) *LedgerFile[T, X] {
	return &LedgerFile[T, X]{path: path}
}

// NewListLedgerFile is a ledger stored at path as a bare JSON array of
// its instances ("null" when there are none).
func NewListLedgerFile[T LedgerInstance](path string) *LedgerFile[T, NoLedgerExtra] {
	return &LedgerFile[T, NoLedgerExtra]{path: path, list: true}
}

// Load reads the ledger; a missing file is an empty ledger. A file that
// does not decode is ErrCorruptLedger, one in a later layout
// ErrUnknownLedgerVersion: the caller must then neither make nor destroy
// anything.
func (f *LedgerFile[T, X]) Load() (*Ledger[T, X], error) {
	raw, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		l := &Ledger[T, X]{}
		l.raw, err = f.encode(l)
		return l, err
	}
	if err != nil {
		return nil, fmt.Errorf("read instance ledger: %w", err)
	}
	l, err := f.decode(raw)
	if err != nil {
		return nil, &unreadableLedger{path: f.path, err: err}
	}
	return l, nil
}

// Save replaces the ledger file with l, unless that would not change it.
func (f *LedgerFile[T, X]) Save(l *Ledger[T, X]) error {
	raw, err := f.encode(l)
	if err != nil {
		return fmt.Errorf("encode instance ledger: %w", err)
	}
	if l.raw != nil && bytes.Equal(raw, l.raw) {
		return nil
	}
	if err := fileutil.WriteAtomic(f.path, raw); err != nil {
		return fmt.Errorf("write instance ledger: %w", err)
	}
	l.raw = raw
	return nil
}

// Release destroys the instances of a claim, as at unprepare. An
// instance that destroy fails on stays in the ledger, for the next
// unprepare or start-up to try again. tidy, if not nil, then brings the
// backend's Extra in line (and may return an error of its own); the
// ledger is saved whatever failed.
func (f *LedgerFile[T, X]) Release(claim types.UID, destroy func(T) error, tidy func(*Ledger[T, X]) error) error {
	return f.release(func(uid types.UID) bool { return uid == claim }, destroy, tidy)
}

// Reconcile implements the Reconciler of a backend with a ledger: the
// instances of claims that are not prepared are destroyed, as Release
// does, and tidy is called once.
func (f *LedgerFile[T, X]) Reconcile(prepared []ClaimState, destroy func(T) error, tidy func(*Ledger[T, X]) error) error {
	live := make(map[types.UID]bool, len(prepared))
	for _, c := range prepared {
		live[c.UID] = true
	}
	return f.release(func(uid types.UID) bool { return !live[uid] }, destroy, tidy)
}

func (f *LedgerFile[T, X]) release(owned func(types.UID) bool, destroy func(T) error, tidy func(*Ledger[T, X]) error) error {
	l, err := f.Load()
	if err != nil {
		return err
	}
	var keep []T
	var errs []error
	for _, in := range l.Instances {
		if !owned(in.ClaimUID()) {
			keep = append(keep, in)
			continue
		}
		if err := destroy(in); err != nil {
			errs = append(errs, err)
			keep = append(keep, in)
		}
	}
	l.Instances = keep
	if tidy != nil {
		errs = append(errs, tidy(l))
	}
	errs = append(errs, f.Save(l))
	return errors.Join(errs...)
}

// ledgerObject is the instances of a ledger in the object layout; the
// members of Extra sit beside them.
type ledgerObject[T any] struct {
	Instances []T `json:"instances,omitempty"`
}

// ledgerVersion finds the version member of a later layout.
type ledgerVersion struct {
	Version json.RawMessage `json:"version"`
}

// decode reads a ledger leniently (members it does not know are
// ignored, as a later release of the same layout may add some) but
// refuses one that says it has a version.
func (f *LedgerFile[T, X]) decode(raw []byte) (*Ledger[T, X], error) {
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		var v ledgerVersion
		if err := json.Unmarshal(raw, &v); err == nil && v.Version != nil {
			return nil, fmt.Errorf("%w: version %s, this plugin reads ledgers without one", ErrUnknownLedgerVersion, v.Version)
		}
	}
	l := &Ledger[T, X]{}
	if f.list {
		if err := json.Unmarshal(raw, &l.Instances); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorruptLedger, err)
		}
	} else {
		var o ledgerObject[T]
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorruptLedger, err)
		}
		if err := json.Unmarshal(raw, &l.Extra); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorruptLedger, err)
		}
		l.Instances = o.Instances
	}
	var err error
	l.raw, err = f.encode(l)
	return l, err
}

// encode writes the layout of the file: a bare array, or the object of
// the instances with the members of Extra after them.
func (f *LedgerFile[T, X]) encode(l *Ledger[T, X]) ([]byte, error) {
	if f.list {
		return json.Marshal(l.Instances)
	}
	head, err := json.Marshal(ledgerObject[T]{Instances: l.Instances})
	if err != nil {
		return nil, err
	}
	extra, err := json.Marshal(l.Extra)
	if err != nil {
		return nil, err
	}
	if len(extra) < 2 || extra[0] != '{' {
		return nil, fmt.Errorf("ledger extra %T does not encode as a JSON object", l.Extra)
	}
	switch {
	case len(extra) == 2: // {}
		return head, nil
	case len(head) == 2:
		return extra, nil
	}
	out := append(head[:len(head)-1:len(head)-1], ',')
	return append(out, extra[1:]...), nil
}
