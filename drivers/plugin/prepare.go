package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/strata-sh/strata/cdi"
)

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. Each claim is
// prepared on its own; one failing claim does not fail the others. The
// batch runs under the instance lock, which excludes the plugin's other
// instances, on the checkpoint as the last of them left it.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	release, err := d.lockAndSyncLocked(ctx)
	if err != nil {
		operationErrors.WithLabelValues(d.cfg.DriverName, "prepare").Add(float64(len(claims)))
		return nil, err
	}
	defer release()
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		logger := klog.LoggerWithValues(klog.FromContext(ctx), "claim", klog.KObj(claim), "claimUID", claim.UID)
		start := time.Now()
		devices, err := d.prepareLocked(klog.NewContext(ctx, logger), claim)
		prepareDuration.WithLabelValues(d.cfg.DriverName, result(err)).Observe(time.Since(start).Seconds())
		if err != nil {
			operationErrors.WithLabelValues(d.cfg.DriverName, "prepare").Inc()
			logger.Error(err, "Prepare failed")
		}
		results[claim.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devices}
	}
	d.updateDeviceGaugesLocked()
	return results, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Like
// PrepareResourceClaims it runs under the instance lock: a claim may be
// unprepared by another instance than the one that prepared it.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	release, err := d.lockAndSyncLocked(ctx)
	if err != nil {
		operationErrors.WithLabelValues(d.cfg.DriverName, "unprepare").Add(float64(len(claims)))
		return nil, err
	}
	defer release()
	results := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		logger := klog.LoggerWithValues(klog.FromContext(ctx), "claim", claim.NamespacedName, "claimUID", claim.UID)
		start := time.Now()
		err := d.unprepareLocked(klog.NewContext(ctx, logger), claim.UID)
		unprepareDuration.WithLabelValues(d.cfg.DriverName, result(err)).Observe(time.Since(start).Seconds())
		if err != nil {
			operationErrors.WithLabelValues(d.cfg.DriverName, "unprepare").Inc()
			logger.Error(err, "Unprepare failed")
		}
		results[claim.UID] = err
	}
	d.updateDeviceGaugesLocked()
	return results, nil
}

func (d *Driver) prepareLocked(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	logger := klog.FromContext(ctx)
	if st, ok := d.state.Claims[claim.UID]; ok {
		if st.Phase == PhasePrepareCompleted {
			logger.V(2).Info("Claim already prepared")
			return d.result(claim.UID, st.Devices), nil
		}
		// A failed attempt in this process was already rolled back, so this
		// is only reachable if that rollback failed: try it again first.
		if err := d.rollbackLocked(ctx, st); err != nil {
			return nil, err
		}
	}
	allocated, err := d.allocatedDevices(claim)
	if err != nil {
		return nil, err
	}
	if err := d.admitLocked(claim, allocated); err != nil {
		var oc *OverCommitError
		if errors.As(err, &oc) {
			d.recorder.Event(claim, corev1.EventTypeWarning, OverCommitReason, err.Error())
			overCommitRefused.WithLabelValues(d.cfg.DriverName).Inc()
		}
		return nil, err
	}
	if v, ok := d.cfg.Backend.(Validator); ok {
		if err := v.Validate(ctx, &PrepareRequest{Claim: claim, Devices: allocated}); err != nil {
			return nil, err
		}
	}

	st := &ClaimState{ClaimRef: ClaimRefOf(claim), Phase: PhasePrepareStarted}
	for _, a := range allocated {
		st.Devices = append(st.Devices, a.Prepared())
	}
	d.state.Claims[claim.UID] = st
	if err := d.store.save(d.state); err != nil {
		delete(d.state.Claims, claim.UID)
		return nil, err
	}

	resp, err := d.cfg.Backend.Prepare(ctx, &PrepareRequest{Claim: claim, Devices: allocated})
	if err != nil {
		// The backend left nothing behind (its contract). Handing it the
		// claim's devices without state now would read as an interrupted
		// prepare and clean up by identity: reset VF settings an operator
		// made, destroy a MIG instance someone else created. Only the
		// record of the attempt goes.
		if ferr := d.forgetLocked(st); ferr != nil {
			return nil, errors.Join(err, fmt.Errorf("forget the failed prepare: %w", ferr))
		}
		return nil, err
	}
	if len(resp.Devices) != len(allocated) {
		err = fmt.Errorf("backend prepared %d devices for %d allocated", len(resp.Devices), len(allocated))
		st.Devices = resp.Devices
	}
	if err == nil {
		st.Devices = withAllocation(resp.Devices, allocated)
		err = d.writeSpec(claim.UID, resp)
	}
	// From here on the backend prepared the claim: a rollback hands it
	// the devices with the state it returned.
	if err == nil {
		st.Phase = PhasePrepareCompleted
		err = d.store.save(d.state)
	}
	if err != nil {
		if rbErr := d.rollbackLocked(ctx, st); rbErr != nil {
			return nil, errors.Join(err, fmt.Errorf("roll back: %w", rbErr))
		}
		return nil, err
	}
	logger.V(1).Info("Claim prepared", "devices", len(st.Devices))
	return d.result(claim.UID, st.Devices), nil
}

func (d *Driver) writeSpec(claimUID types.UID, resp *PrepareResponse) error {
	devices := make([]cdi.Device, 0, len(resp.Devices))
	for _, p := range resp.Devices {
		devices = append(devices, cdi.Device{Name: p.Device, Edits: p.Edits})
	}
	_, err := d.cdi.WriteClaimSpec(string(claimUID), resp.Common, devices)
	return err
}

func (d *Driver) result(claimUID types.UID, devices []PreparedDevice) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(devices))
	for _, p := range devices {
		out = append(out, kubeletplugin.Device{
			Requests:     []string{p.Request},
			PoolName:     p.Pool,
			DeviceName:   p.Device,
			CDIDeviceIDs: []string{d.cdi.DeviceID(string(claimUID), p.Device)},
			ShareID:      p.ShareID,
		})
	}
	return out
}

func (d *Driver) unprepareLocked(ctx context.Context, uid types.UID) error {
	st, ok := d.state.Claims[uid]
	if !ok {
		// Unknown claim: prepared by nobody, or already unprepared. Make sure
		// no spec is left and report success, as the kubelet retries.
		return d.cdi.RemoveClaimSpec(string(uid))
	}
	if err := d.rollbackLocked(ctx, st); err != nil {
		return err
	}
	klog.FromContext(ctx).V(1).Info("Claim unprepared", "devices", len(st.Devices))
	return nil
}

// forgetLocked drops the record of a claim whose prepare failed in the
// backend, which undid its own work: its CDI spec, if any, and its
// checkpoint entry.
func (d *Driver) forgetLocked(st *ClaimState) error {
	if err := d.cdi.RemoveClaimSpec(string(st.UID)); err != nil {
		return err
	}
	delete(d.state.Claims, st.UID)
	return d.store.save(d.state)
}

// rollbackLocked undoes a claim in any phase: backend first, then the CDI
// spec, then the checkpoint entry. If a step fails the entry stays so that
// the next unprepare or start-up tries again.
func (d *Driver) rollbackLocked(ctx context.Context, st *ClaimState) error {
	if err := d.cfg.Backend.Unprepare(ctx, st.ClaimRef, st.Devices); err != nil {
		return fmt.Errorf("release devices: %w", err)
	}
	if err := d.cdi.RemoveClaimSpec(string(st.UID)); err != nil {
		return err
	}
	delete(d.state.Claims, st.UID)
	return d.store.save(d.state)
}

// allocatedDevices returns the devices of this driver in the claim's
// allocation with the opaque configs that apply to each.
func (d *Driver) allocatedDevices(claim *resourceapi.ResourceClaim) ([]AllocatedDevice, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	alloc := claim.Status.Allocation.Devices
	configs, err := newDeviceConfigs(d.cfg.Backend, d.cfg.DriverName, alloc.Config)
	if err != nil {
		return nil, err
	}
	var out []AllocatedDevice
	for _, r := range alloc.Results {
		if r.Driver != d.cfg.DriverName {
			continue
		}
		a := AllocatedDevice{Request: r.Request, Pool: r.Pool, Device: r.Device, ShareID: r.ShareID,
			AdminAccess: r.AdminAccess != nil && *r.AdminAccess}
		if len(r.ConsumedCapacity) > 0 {
			a.ConsumedCapacity = make(map[resourceapi.QualifiedName]string, len(r.ConsumedCapacity))
			for name, q := range r.ConsumedCapacity {
				a.ConsumedCapacity[name] = q.String()
			}
		}
		if a.Config, err = configs.forRequest(r.Request); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("claim %s/%s has no device of driver %s", claim.Namespace, claim.Name, d.cfg.DriverName)
	}
	return out, nil
}

// requestMatches reports whether a config's request name covers an
// allocation result's request, which may be "parent/subrequest".
func requestMatches(configRequest, resultRequest string) bool {
	if configRequest == resultRequest {
		return true
	}
	parent, _, found := strings.Cut(resultRequest, "/")
	return found && parent == configRequest
}

// withAllocation records in each prepared device the allocation's share
// ID, consumed capacity and admin access, whatever the backend returned:
// the next prepare counts what this claim holds from them.
func withAllocation(prepared []PreparedDevice, allocated []AllocatedDevice) []PreparedDevice {
	used := make([]bool, len(allocated))
	for i := range prepared {
		p := &prepared[i]
		for j, a := range allocated {
			if !used[j] && a.Request == p.Request && a.Pool == p.Pool && a.Device == p.Device &&
				(p.ShareID == nil || sameShare(a.ShareID, p.ShareID)) {
				used[j] = true
				p.ShareID, p.ConsumedCapacity, p.AdminAccess = a.ShareID, a.ConsumedCapacity, a.AdminAccess
				break
			}
		}
	}
	return prepared
}

func sameShare(a, b *types.UID) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
