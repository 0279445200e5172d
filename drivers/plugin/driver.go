package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/cdi"
	"github.com/strata-sh/strata/internal/fileutil"
)

// DefaultBootIDPath is where Linux exposes the id of the current boot.
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

// Config is everything a Driver needs to run on one node.
type Config struct {
	// DriverName is the DRA driver name, e.g. nvidia.strata.sh.
	DriverName string
	// NodeName and NodeUID identify the node whose slices are published.
	// NodeUID is optional.
	NodeName string
	NodeUID  types.UID
	// KubeClient publishes slices, reads claims and records events.
	KubeClient kubernetes.Interface
	// Backend is the vendor hardware.
	Backend Backend
	// PluginDataDir holds the DRA socket and the checkpoint.
	PluginDataDir string
	// RegistrarDir is where kubelet looks for plugin registration sockets.
	RegistrarDir string
	// CDIDir is where per-claim CDI specs are written.
	CDIDir string
	// BootIDPath is read to detect reboots. Empty disables the check.
	BootIDPath string
	// RollingUpdateUID is the UID of the plugin's pod. Set, it lets a
	// DaemonSet rolling update (maxSurge) start the new plugin pod while
	// the old one still serves: the sockets of each instance carry its
	// pod UID and the kubelet may call either instance. Empty means one
	// instance per node at a time. Either way instances coordinate
	// through a lock file in PluginDataDir.
	RollingUpdateUID types.UID
	// Events, if set, sends the plugin's events; otherwise the plugin
	// starts a broadcaster of its own. A process that runs many plugins
	// (strata-sim runs one per simulated node) shares one.
	Events record.EventBroadcaster
	// Simulated marks every published device with the attribute
	// SimulatedAttribute: the plugin runs on a simulated machine.
	Simulated bool
}

// SimulatedAttribute is the device attribute, in the driver's own
// domain, that a plugin on a simulated machine sets to true on every
// device it publishes, so that users and CEL selectors can tell them
// from real ones.
const SimulatedAttribute resourceapi.QualifiedName = "simulated"

func (c *Config) validate() error {
	var errs []error
	if c.DriverName == "" {
		errs = append(errs, errors.New("driver name is required"))
	}
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if c.KubeClient == nil {
		errs = append(errs, errors.New("kube client is required"))
	}
	if c.Backend == nil {
		errs = append(errs, errors.New("backend is required"))
	}
	for name, dir := range map[string]string{"plugin data": c.PluginDataDir, "registrar": c.RegistrarDir, "CDI": c.CDIDir} {
		if dir == "" {
			errs = append(errs, fmt.Errorf("%s directory is required", name))
		}
	}
	if c.DriverName != "" && c.PluginDataDir != "" && c.RegistrarDir != "" {
		errs = append(errs, c.checkSocketPaths())
	}
	return errors.Join(errs...)
}

// maxSocketPath is the longest path a unix socket can be bound to: the
// 108 bytes of sun_path hold its terminating NUL too.
const maxSocketPath = 107

// checkSocketPaths refuses folders too long for the sockets the kubelet
// plugin helper makes in them, naming the flag, before the helper fails
// to bind with "invalid argument". The helper's own length check for the
// registration socket of a rolling update counts 108 bytes as fitting
// (dynamic-resource-allocation v0.37.2), so a path of exactly 108 bytes
// is caught here.
func (c *Config) checkSocketPaths() error {
	uidPart, registration := "", c.DriverName+"-reg.sock"
	if c.RollingUpdateUID != "" {
		uidPart = "-" + string(c.RollingUpdateUID)
		registration = kubeletplugin.RollingUpdateRegistrarSocketFile(c.RegistrarDir, c.DriverName, c.RollingUpdateUID)
	}
	var errs []error
	for flag, sock := range map[string]string{
		"--registrar-dir":   filepath.Join(c.RegistrarDir, registration),
		"--plugin-data-dir": filepath.Join(c.PluginDataDir, "dra"+uidPart+".sock"),
	} {
		if len(sock) > maxSocketPath {
			errs = append(errs, fmt.Errorf("%s: socket %s is %d bytes, more than the %d a unix socket path holds; use a shorter folder", flag, sock, len(sock), maxSocketPath))
		}
	}
	return errors.Join(errs...)
}

// Driver is a running kubelet plugin for one driver on one node.
type Driver struct {
	cfg   Config
	cdi   *cdi.Writer
	store checkpointStore
	// lock excludes the other instances of the plugin on the node: it is
	// held, after mu, while state is brought up to date with the
	// checkpoint and while the checkpoint, the CDI specs or the hardware
	// change, and released when the plugin is idle.
	lock     fileutil.Lock
	recorder record.EventRecorder
	stopRec  func()
	helper   *kubeletplugin.Helper
	// stopWatch ends the backend's health watch; watchDone closes when it
	// has returned.
	stopWatch context.CancelFunc
	watchDone chan struct{}
	// stopLive ends the liveness watchdog; liveDone closes when it has
	// returned.
	stopLive context.CancelFunc
	liveDone chan struct{}

	// mu guards state and the checkpoint file. The kubelet plugin helper
	// already serializes gRPC calls; the lock also covers start-up
	// recovery and republishing.
	mu        sync.Mutex
	state     *checkpointData
	inventory *Inventory
	// published is closed and replaced at every publish; health watchers
	// wait on it.
	published chan struct{}
}

// Start recovers the checkpoint, discovers devices, starts the DRA and
// registration gRPC services and publishes the node's ResourceSlices.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kubelet plugin config: %w", err)
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "driver", cfg.DriverName, "node", cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)

	for _, dir := range []string{cfg.PluginDataDir, cfg.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	d, err := newDriver(cfg)
	if err != nil {
		return nil, err
	}
	d.recorder, d.stopRec = newRecorder(ctx, cfg)
	register()

	if err := d.startUp(ctx); err != nil {
		d.reportRefusal(ctx, err, true)
		d.stopRec()
		return nil, err
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(cfg.DriverName),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.NodeUID(cfg.NodeUID),
		kubeletplugin.KubeClient(cfg.KubeClient),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir),
	}
	if cfg.RollingUpdateUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(cfg.RollingUpdateUID))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		d.stopRec()
		return nil, fmt.Errorf("start kubelet plugin helper: %w", err)
	}
	d.helper = helper
	if err := d.publish(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	liveCtx, stopLive := context.WithCancel(ctx)
	d.stopLive, d.liveDone = stopLive, make(chan struct{})
	go func() {
		defer close(d.liveDone)
		d.watchLiveness(liveCtx)
	}()
	if hw, ok := cfg.Backend.(HealthWatcher); ok {
		watchCtx, cancel := context.WithCancel(ctx)
		d.stopWatch = cancel
		d.watchDone = make(chan struct{})
		go func() {
			defer close(d.watchDone)
			hw.WatchHealth(watchCtx, func() {
				if err := d.Republish(watchCtx); err != nil && watchCtx.Err() == nil {
					logger.Error(err, "Republishing after a health change failed")
				}
			})
		}()
	}
	logger.V(1).Info("Kubelet plugin started", "devices", len(d.inventory.Devices))
	return d, nil
}

// newDriver returns a driver that has not started: its checkpoint, lock
// file and CDI specs are where cfg says.
func newDriver(cfg Config) (*Driver, error) {
	writer, err := cdi.NewWriter(cfg.DriverName, cfg.CDIDir)
	if err != nil {
		return nil, err
	}
	return &Driver{
		cfg:   cfg,
		cdi:   writer,
		store: checkpointStore{path: filepath.Join(cfg.PluginDataDir, "checkpoint.json")},
		lock:  instanceLock(cfg.PluginDataDir),
	}, nil
}

// Stop shuts down the gRPC services and slice publishing. Published slices
// stay in the API server, as they do when a real plugin restarts.
func (d *Driver) Stop() {
	if d.stopLive != nil {
		d.stopLive()
		<-d.liveDone
	}
	if d.stopWatch != nil {
		d.stopWatch()
		<-d.watchDone
	}
	d.helper.Stop()
	d.stopRec()
}

// CDI returns the writer of this driver's CDI specs.
func (d *Driver) CDI() *cdi.Writer { return d.cdi }

// Republish rediscovers the devices and publishes them again, for example
// after a health change.
func (d *Driver) Republish(ctx context.Context) error {
	if err := d.refreshInventory(ctx); err != nil {
		return err
	}
	return d.publish(ctx)
}

// refreshInventory rediscovers the devices. What the backend discovers
// may depend on the checkpoint (whose MIG instances are the plugin's
// own), so the checkpoint that another instance may have written is
// loaded first.
func (d *Driver) refreshInventory(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	release, err := d.lock.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	reloaded, err := d.syncLocked(ctx)
	if err != nil || reloaded {
		return err
	}
	return d.refreshInventoryLocked(ctx)
}

func (d *Driver) refreshInventoryLocked(ctx context.Context) error {
	inv, err := d.cfg.Backend.Discover(ctx)
	if err != nil {
		return fmt.Errorf("discover devices: %w", err)
	}
	d.inventory = inv
	return nil
}

func (d *Driver) publish(ctx context.Context) error {
	d.mu.Lock()
	resources, err := driverResources(d.cfg.NodeName, d.inventory)
	if err == nil && d.cfg.Simulated {
		markSimulated(resources)
	}
	d.updateDeviceGaugesLocked()
	d.notifyPublishedLocked()
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := d.helper.PublishResources(ctx, *resources); err != nil {
		return fmt.Errorf("publish resource slices: %w", err)
	}
	return nil
}

// HandleError implements kubeletplugin.DRAPlugin. Slice publishing errors
// are retried by the helper; they are logged so that an operator sees them.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
}

func newRecorder(ctx context.Context, cfg Config) (record.EventRecorder, func()) {
	source := corev1.EventSource{Component: cfg.DriverName, Host: cfg.NodeName}
	if cfg.Events != nil {
		return cfg.Events.NewRecorder(scheme.Scheme, source), func() {}
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.KubeClient.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, source)
	return recorder, broadcaster.Shutdown
}

// nodeRef is the object events about the plugin are attached to.
func (d *Driver) nodeRef() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: d.cfg.NodeName, UID: d.cfg.NodeUID}
}

// startUp brings the plugin's state back before it serves anything, under
// the instance lock, which excludes the other instances: while an old
// instance is in the middle of a prepare, a new one waits, so that it
// neither rolls back that prepare nor removes its CDI spec as an orphan.
func (d *Driver) startUp(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	release, err := d.lock.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	return d.restoreLocked(ctx, true)
}

// restoreLocked makes state, backend and disk what the checkpoint says:
// the checkpoint is loaded and handed to the backend, devices are
// discovered (rolling back an interrupted prepare needs them, and a
// backend may need the checkpoint to discover them), then disk and
// hardware are recovered. It runs at start-up and whenever another
// instance of the plugin wrote the checkpoint. An unreadable checkpoint,
// or an instance ledger the backend could not read, is a refusal. The
// caller holds mu and the lock.
func (d *Driver) restoreLocked(ctx context.Context, startUp bool) error {
	if err := d.loadCheckpointLocked(ctx); err != nil {
		return err
	}
	if r, ok := d.cfg.Backend.(Restorer); ok {
		r.Restore(ctx, d.claimStatesLocked())
	}
	if err := d.refreshInventoryLocked(ctx); err != nil {
		return ledgerRefusal(err)
	}
	return ledgerRefusal(d.recoverLocked(ctx, startUp))
}

// ledgerRefusal turns an instance ledger that does not decode, which a
// backend met while discovering or reconciling, into a refusal naming the
// file. Like a checkpoint in an unknown version it is left as it is and
// the plugin refuses to serve; unlike a corrupt checkpoint it cannot be
// rebuilt from the API server, as only the ledger knows which instance a
// claim got. Other errors are returned as they are.
func ledgerRefusal(err error) error {
	var ledger *unreadableLedger
	var r *refusal
	if !errors.As(err, &ledger) || errors.As(err, &r) {
		return err
	}
	if errors.Is(ledger, ErrUnknownLedgerVersion) {
		return &refusal{reason: "LedgerVersionUnknown",
			err: fmt.Errorf("%w; refusing to serve, making and destroying no instance, until a release that reads it runs", ledger)}
	}
	return &refusal{reason: "LedgerCorrupt",
		err: fmt.Errorf("%w; refusing to serve, making and destroying no instance, until the file is repaired (it cannot be rebuilt: only it knows which instances are the plugin's)", ledger)}
}

// lockAndSyncLocked takes the instance lock, which excludes the plugin's
// other instances on the node, and brings state up to date with the
// checkpoint. The caller holds mu and must call release.
func (d *Driver) lockAndSyncLocked(ctx context.Context) (release func(), err error) {
	release, err = d.lock.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := d.syncLocked(ctx); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// syncLocked reloads the checkpoint if another instance of the plugin
// wrote it since this one last read or wrote it, and hands it to the
// backend again, as at start-up. It reports whether it reloaded. The
// caller holds mu and the lock.
func (d *Driver) syncLocked(ctx context.Context) (bool, error) {
	changed, err := d.store.changed()
	if err != nil || !changed {
		return false, err
	}
	klog.FromContext(ctx).V(1).Info("Checkpoint was written by another instance of the plugin, reloading it")
	if err := d.restoreLocked(ctx, false); err != nil {
		d.reportRefusal(ctx, err, false)
		d.store.seen = "" // so that the next call tries again
		return true, fmt.Errorf("reload the checkpoint written by another instance of the plugin: %w", err)
	}
	d.updateDeviceGaugesLocked()
	return true, nil
}

// loadCheckpointLocked reads the checkpoint and drops state from an
// earlier boot. A checkpoint that cannot be used is never replaced by an
// empty state, which would make recovery destroy what running pods use:
//   - one in a version this plugin does not know (a newer release's, met
//     when a rollout is rolled back) is left alone, and the plugin
//     refuses to serve until a release that reads it runs;
//   - a corrupt one, or a missing one while CDI specs of this driver are
//     on disk, is moved aside and the prepared claims are rebuilt from the
//     API server (rebuildLocked); if that fails the plugin refuses to
//     serve.
func (d *Driver) loadCheckpointLocked(ctx context.Context) error {
	logger := klog.FromContext(ctx)

	bootID, err := readBootID(d.cfg.BootIDPath)
	if err != nil {
		return err
	}
	_, statErr := os.Stat(d.store.path)
	missing := errors.Is(statErr, fs.ErrNotExist)
	state, err := d.store.load()
	switch {
	case errors.Is(err, ErrUnknownCheckpointVersion):
		return &refusal{reason: "CheckpointVersionUnknown",
			err: fmt.Errorf("%w: refusing to serve, touching no device, claim or CDI spec, until a release that reads it runs", err)}
	case errors.Is(err, ErrCorruptCheckpoint):
		moved, qerr := d.store.quarantine(time.Now())
		if qerr != nil {
			return errors.Join(err, qerr)
		}
		if state, err = d.rebuildLocked(ctx, bootID); err != nil {
			return &refusal{reason: "CheckpointCorrupt",
				err: fmt.Errorf("checkpoint was corrupt (moved to %s) and the prepared claims could not be rebuilt from the API server: %w; refusing to serve", moved, err)}
		}
		logger.Error(nil, "Checkpoint was corrupt, rebuilt the prepared claims from the API server", "movedTo", moved, "claims", len(state.Claims))
		d.recorder.Eventf(d.nodeRef(), corev1.EventTypeWarning, "CheckpointCorrupt",
			"%s: checkpoint was corrupt and was moved to %s; %d prepared claims were rebuilt from the API server, and nothing is released until they are unprepared", d.cfg.DriverName, moved, len(state.Claims))
	case err != nil:
		return err
	case missing:
		uids, err := d.cdi.ClaimUIDs()
		if err != nil {
			return err
		}
		if len(uids) > 0 {
			if state, err = d.rebuildLocked(ctx, bootID); err != nil {
				return &refusal{reason: "CheckpointMissing",
					err: fmt.Errorf("checkpoint is missing while %d CDI specs of this driver are on disk, and the prepared claims could not be rebuilt from the API server: %w; refusing to serve", len(uids), err)}
			}
			logger.Error(nil, "Checkpoint is missing while CDI specs are on disk, rebuilt the prepared claims from the API server", "specs", len(uids), "claims", len(state.Claims))
			d.recorder.Eventf(d.nodeRef(), corev1.EventTypeWarning, "CheckpointMissing",
				"%s: checkpoint is missing while %d CDI specs are on disk; %d prepared claims were rebuilt from the API server, and nothing is released until they are unprepared", d.cfg.DriverName, len(uids), len(state.Claims))
		}
	}
	if state.BootID != "" && bootID != "" && state.BootID != bootID {
		logger.V(1).Info("Node rebooted since the checkpoint was written, dropping prepared state", "claims", len(state.Claims))
		state.Claims = map[types.UID]*ClaimState{}
	}
	state.BootID = bootID
	d.state = state
	return nil
}

// rebuildLocked rebuilds the prepared claims from the API server: the
// claims allocated devices of this driver on this node, reserved for a
// pod, whose CDI spec is on disk (a claim without one was not prepared,
// and is prepared when the kubelet asks). They are recorded as prepared
// and Recovered.
func (d *Driver) rebuildLocked(ctx context.Context, bootID string) (*checkpointData, error) {
	if d.cfg.KubeClient == nil {
		return nil, errors.New("no API client")
	}
	onDisk := map[string]bool{}
	uids, err := d.cdi.ClaimUIDs()
	if err != nil {
		return nil, err
	}
	for _, uid := range uids {
		onDisk[uid] = true
	}
	listCtx, cancel := context.WithTimeout(ctx, rebuildTimeout)
	defer cancel()
	claims, err := d.cfg.KubeClient.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(listCtx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ResourceClaims: %w", err)
	}
	state := &checkpointData{BootID: bootID, Claims: map[types.UID]*ClaimState{}}
	for i := range claims.Items {
		claim := &claims.Items[i]
		if claim.Status.Allocation == nil || len(claim.Status.ReservedFor) == 0 || !onDisk[string(claim.UID)] {
			continue
		}
		allocated, err := d.allocatedDevices(claim)
		if err != nil {
			continue // another driver's, or not allocated
		}
		st := &ClaimState{ClaimRef: ClaimRefOf(claim), Phase: PhasePrepareCompleted, Recovered: true}
		for _, a := range allocated {
			if a.Pool == d.cfg.NodeName {
				st.Devices = append(st.Devices, a.Prepared())
			}
		}
		if len(st.Devices) > 0 {
			state.Claims[claim.UID] = st
		}
	}
	return state, nil
}

// refusal is an error for which the plugin refuses to serve, with the
// reason of the event that tells the operator.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// reportRefusal posts a warning event on the node for err. At start-up
// (now) it is written before returning, as the process exits next and an
// event queued in the recorder would be lost.
func (d *Driver) reportRefusal(ctx context.Context, err error, now bool) {
	reason := "StartFailed"
	var r *refusal
	if errors.As(err, &r) {
		reason = r.reason
	} else if !now {
		return
	}
	msg := d.cfg.DriverName + ": " + err.Error()
	if !now || d.cfg.Events != nil || d.cfg.KubeClient == nil {
		d.recorder.Event(d.nodeRef(), corev1.EventTypeWarning, reason, msg)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: d.cfg.NodeName + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: *d.nodeRef(),
		Reason:         reason,
		Message:        msg,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: d.cfg.DriverName, Host: d.cfg.NodeName},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
	}
	if _, err := d.cfg.KubeClient.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Posting the event about refusing to start failed", "reason", reason)
	}
}

// rebuildTimeout bounds the API read that rebuilds a lost checkpoint.
const rebuildTimeout = 30 * time.Second

// anyRecoveredLocked reports whether a claim rebuilt from the API server
// is still prepared.
func (d *Driver) anyRecoveredLocked() bool {
	for _, c := range d.state.Claims {
		if c.Recovered {
			return true
		}
	}
	return false
}

// claimStatesLocked copies every claim of the checkpoint.
func (d *Driver) claimStatesLocked() []ClaimState {
	out := make([]ClaimState, 0, len(d.state.Claims))
	for _, c := range d.state.Claims {
		out = append(out, *c)
	}
	return out
}

// recoverLocked brings disk and hardware back in line with the loaded
// checkpoint: interrupted prepares are rolled back, the backend
// reconciles, and CDI specs that no claim owns are removed. Under the
// lock no other instance is in the middle of a prepare, so a prepare
// that is not complete was interrupted, and every spec that another
// instance wrote belongs to a claim of the checkpoint.
//
// At start-up a failed rollback fails the start. Later, when another
// instance wrote the checkpoint, it is logged and the claim stays in the
// checkpoint, keeping its devices from other claims, until its next
// prepare or unprepare or the next start-up tries again: the claims this
// instance serves are not held up by another's leftovers.
func (d *Driver) recoverLocked(ctx context.Context, startUp bool) error {
	logger := klog.FromContext(ctx)
	state := d.state

	for uid, claim := range state.Claims {
		if claim.Phase == PhasePrepareCompleted {
			continue
		}
		logger.V(1).Info("Rolling back interrupted prepare", "claim", klog.KRef(claim.Namespace, claim.Name), "claimUID", uid)
		if err := d.rollbackLocked(ctx, claim); err != nil {
			err = fmt.Errorf("roll back interrupted prepare of claim %s/%s: %w", claim.Namespace, claim.Name, err)
			if startUp {
				return err
			}
			logger.Error(err, "Rollback failed, keeping the claim in the checkpoint to try again later", "claim", klog.KRef(claim.Namespace, claim.Name), "claimUID", uid)
		}
	}
	if d.anyRecoveredLocked() {
		// What the lost checkpoint knew of partitions and specs is gone:
		// leftovers cannot be told apart from what running pods use.
		logger.Info("Prepared claims were rebuilt from the API server: leaving hardware state and CDI specs that no claim names alone until they are unprepared")
		return d.store.save(state)
	}
	if r, ok := d.cfg.Backend.(Reconciler); ok {
		prepared := make([]ClaimState, 0, len(state.Claims))
		for _, c := range state.Claims {
			prepared = append(prepared, *c)
		}
		if err := r.Reconcile(ctx, prepared); err != nil {
			return fmt.Errorf("reconcile devices with the checkpoint: %w", err)
		}
	}
	uids, err := d.cdi.ClaimUIDs()
	if err != nil {
		return err
	}
	for _, uid := range uids {
		if _, ok := state.Claims[types.UID(uid)]; ok {
			continue
		}
		logger.V(1).Info("Removing orphaned CDI spec", "claimUID", uid)
		if err := d.cdi.RemoveClaimSpec(uid); err != nil {
			return err
		}
	}
	return d.store.save(state)
}
