// Package plugin is Strata's generic DRA kubelet plugin. It publishes the
// ResourceSlices of one driver on one node, prepares and unprepares claims
// for the kubelet, writes one CDI spec per claim and keeps a two-phase
// checkpoint so that a restarted plugin neither forgets nor leaks what it
// prepared. During a rolling update of its DaemonSet an old and a new
// instance run side by side and share the checkpoint under a file lock.
//
// Everything vendor-specific sits behind Backend; this package never imports
// a vendor package. A plugin binary's flags, main function and probe
// command are package pluginmain's, which builds this package's Config;
// this package never imports it.
package plugin

import (
	"context"
	"encoding/json"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Backend hides one vendor's hardware from the generic plugin.
type Backend interface {
	// Discover reports the devices of this node as they should be published.
	Discover(ctx context.Context) (*Inventory, error)

	// Prepare readies the devices of one claim. On error it must leave
	// nothing behind: the plugin records no state for a failed claim.
	Prepare(ctx context.Context, req *PrepareRequest) (*PrepareResponse, error)

	// Unprepare undoes Prepare. devices carry the State that Prepare
	// returned, or no State when the plugin stopped between recording the
	// start of a prepare and its completion; Unprepare must then clean up
	// by device identity alone. Unprepare must be idempotent.
	Unprepare(ctx context.Context, claim ClaimRef, devices []PreparedDevice) error
}

// Validator is implemented by backends that can reject a claim, for
// example a bad opaque configuration, before anything is recorded or
// touched. The plugin calls it before the checkpoint notes the prepare, so
// a claim that can never be prepared leaves no trace, not even briefly.
type Validator interface {
	Validate(ctx context.Context, req *PrepareRequest) error
}

// Inventory is what a backend publishes for its node, in allocator order:
// the scheduler tries devices first to last.
type Inventory struct {
	// Devices are the DRA devices of the node's pool.
	Devices []resourceapi.Device
	// SharedCounters are the counter sets that Devices consume from.
	SharedCounters []resourceapi.CounterSet
}

// ClaimRef identifies a claim; it is all that is left at unprepare time.
type ClaimRef struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// AllocatedDevice is one device of a claim that belongs to this driver,
// with the opaque configuration that applies to it.
type AllocatedDevice struct {
	// Request is the (sub)request the device was allocated for.
	Request string
	// Pool and Device identify the device in the published slices.
	Pool   string
	Device string
	// ShareID is set for devices that allow multiple allocations.
	ShareID *types.UID
	// ConsumedCapacity is what the claim consumes of a shared device.
	ConsumedCapacity map[resourceapi.QualifiedName]string
	// AdminAccess is set for a result allocated with admin access: the
	// device is reached for monitoring or maintenance and consumed by
	// nobody.
	AdminAccess bool
	// Config is the device's effective opaque configuration, as the
	// backend's ConfigHandler made it from the configs that apply (nil for
	// a backend that is not Configurable).
	Config any
}

// PrepareRequest is one claim to prepare.
type PrepareRequest struct {
	Claim   *resourceapi.ResourceClaim
	Devices []AllocatedDevice
}

// PrepareResponse is what a backend prepared for a claim.
type PrepareResponse struct {
	// Common edits apply to every container using any device of the claim
	// (control device nodes, for example).
	Common cdispec.ContainerEdits
	// Devices has one entry per requested device, in request order.
	Devices []PreparedDevice
}

// PreparedDevice is one prepared device, as recorded in the checkpoint.
type PreparedDevice struct {
	Request string     `json:"request"`
	Pool    string     `json:"pool"`
	Device  string     `json:"device"`
	ShareID *types.UID `json:"shareID,omitempty"`
	// Edits are what the container runtime applies for this device.
	Edits cdispec.ContainerEdits `json:"edits"`
	// State is backend-private data needed to undo the prepare, such as
	// the id of a partition created for the claim.
	State json.RawMessage `json:"state,omitempty"`
	// ConsumedCapacity and AdminAccess are the allocation's, recorded by
	// the plugin core (whatever the backend returns) so that the next
	// prepare can count what this claim holds.
	ConsumedCapacity map[resourceapi.QualifiedName]string `json:"consumedCapacity,omitempty"`
	AdminAccess      bool                                 `json:"adminAccess,omitempty"`
}

// Prepared returns the checkpoint record of an allocated device, for a
// backend to fill in its edits and state.
func (a AllocatedDevice) Prepared() PreparedDevice {
	return PreparedDevice{Request: a.Request, Pool: a.Pool, Device: a.Device, ShareID: a.ShareID,
		ConsumedCapacity: a.ConsumedCapacity, AdminAccess: a.AdminAccess}
}

// ClaimRefOf is the reference of a claim; a nil claim has the zero
// ClaimRef.
func ClaimRefOf(claim *resourceapi.ResourceClaim) ClaimRef {
	if claim == nil {
		return ClaimRef{}
	}
	return ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
}

// String is the claim's namespace/name.
func (r ClaimRef) String() string { return r.Namespace + "/" + r.Name }

// Reconciler is implemented by backends that hold hardware state outside
// the checkpoint (partitions, daemons). After start-up recovery the plugin
// hands it every prepared claim, and the backend releases whatever no
// claim owns, as left behind by a crash mid-prepare.
//
// During a rolling update another instance of the plugin, with a backend
// of its own, prepares and unprepares claims on the same hardware. Before
// the next prepare or unprepare after that, the plugin recovers again from
// the checkpoint the other instance wrote: Restore, Discover and Reconcile
// are called again, with every claim of the node. What a backend derives
// from them (its own partitions, the users of a daemon) must be replaced,
// not added to.
type Reconciler interface {
	Reconcile(ctx context.Context, prepared []ClaimState) error
}

// Restorer is implemented by backends that must know, before they first
// discover devices, which devices the checkpoint names: every claim,
// prepared or interrupted mid-prepare. A backend that makes hardware
// state (partitions) tells its own from an operator's this way. Like
// Reconcile, Restore is called again when another instance of the plugin
// changed the checkpoint.
type Restorer interface {
	Restore(ctx context.Context, claims []ClaimState)
}

// HealthWatcher is implemented by backends that monitor device health.
// WatchHealth runs until ctx ends and calls changed whenever Discover
// would now report different devices (taints).
type HealthWatcher interface {
	WatchHealth(ctx context.Context, changed func())
}
