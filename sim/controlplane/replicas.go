package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// replica is one strata-scheduler replica under leader election, and the
// supervisor that restarts it when it stops, as the kubelet restarts a
// crashed container.
type replica struct {
	name string

	mu       sync.Mutex
	run      *schedulerRun
	wire     *Wire
	cancel   context.CancelFunc
	leading  bool
	identity string
	starts   int
}

// ReplicaStatus is what a scheduler replica is doing.
type ReplicaStatus struct {
	// Name is the replica's name, scheduler-0, scheduler-1, ...; it is
	// kept across restarts.
	Name string
	// Identity is its current incarnation's leader election identity.
	Identity string
	Running  bool
	Leading  bool
	// Starts counts its incarnations.
	Starts int
}

// schedulerSetup is what every scheduler incarnation is started with.
type schedulerSetup struct {
	config   []byte
	plugins  runtime.Registry
	identity *Identity
}

// startReplicas starts n replicas with leader election and returns once
// one of them leads.
func (cp *ControlPlane) startReplicas(ctx context.Context, n int, setup schedulerSetup) error {
	for i := 0; i < n; i++ {
		r := &replica{name: fmt.Sprintf("scheduler-%d", i)}
		cp.replicas = append(cp.replicas, r)
		started := make(chan error, 1)
		go cp.supervise(ctx, r, setup, started)
		if err := <-started; err != nil {
			return fmt.Errorf("start %s: %w", r.name, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for cp.SchedulerLeader() == "" {
		if time.Now().After(deadline) {
			return fmt.Errorf("no scheduler replica became leader within a minute")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// supervise runs r until ctx ends: started gets the outcome of its
// first start, and each time it stops it starts again after
// RestartAfter.
func (cp *ControlPlane) supervise(ctx context.Context, r *replica, setup schedulerSetup, started chan<- error) {
	logger := klog.FromContext(ctx)
	restartAfter := cp.opts.LeaderElection.RestartAfter
	if restartAfter == 0 {
		restartAfter = time.Second
	}
	for first := true; ctx.Err() == nil; first = false {
		done, err := cp.startReplica(ctx, r, setup)
		if first {
			started <- err
			if err != nil {
				return
			}
		}
		if err != nil {
			logger.Error(err, "Scheduler replica did not start; trying again", "replica", r.name)
		} else {
			<-done
			logger.V(1).Info("Scheduler replica stopped", "replica", r.name)
		}
		select {
		case <-ctx.Done():
		case <-time.After(restartAfter):
		}
	}
}

// startReplica starts one incarnation of r behind a wire of its own and
// returns a channel closed once it has stopped.
func (cp *ControlPlane) startReplica(ctx context.Context, r *replica, setup schedulerSetup) (<-chan struct{}, error) {
	dir := filepath.Join(cp.Dir, r.name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	wire, err := newWire(r.name, &cp.faults, cp.Config)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.writeKubeconfigVia(kubeconfig, setup.identity, wire); err != nil {
		wire.Cut()
		return nil, err
	}
	r.mu.Lock()
	r.leading = false
	incarnation := r.starts + 1
	r.mu.Unlock()
	rctx, cancel := context.WithCancel(context.WithValue(ctx, replicaKey{}, replicaValue{r.name, incarnation}))
	rctx = klog.NewContext(rctx, klog.LoggerWithName(klog.FromContext(ctx), r.name))
	run, err := startScheduler(rctx, dir, kubeconfig, setup.config, setup.plugins, cp.opts.LeaderElection, func(leading bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.leading = leading
		if !leading {
			// kube-scheduler exits when it stops leading: nothing it
			// had in flight reaches the API server any more.
			wire.Cut()
		}
	})
	if err != nil {
		cancel()
		wire.Cut()
		return nil, err
	}
	r.mu.Lock()
	r.run, r.wire, r.cancel, r.identity, r.starts = run, wire, cancel, run.identity, incarnation
	r.mu.Unlock()
	go func() {
		<-run.done
		wire.Cut()
		cancel()
	}()
	return run.done, nil
}

// SchedulerReplicas says what each scheduler replica is doing; empty
// without Options.LeaderElection.
func (cp *ControlPlane) SchedulerReplicas() []ReplicaStatus {
	var out []ReplicaStatus
	for _, r := range cp.replicas {
		r.mu.Lock()
		st := ReplicaStatus{Name: r.name, Identity: r.identity, Leading: r.leading, Starts: r.starts}
		if r.run != nil {
			select {
			case <-r.run.done:
			default:
				st.Running = true
			}
		}
		r.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// SchedulerLeader is the name of the scheduler replica that leads now,
// "" while none does.
func (cp *ControlPlane) SchedulerLeader() string {
	for _, st := range cp.SchedulerReplicas() {
		if st.Leading && st.Running {
			return st.Name
		}
	}
	return ""
}

// KillScheduler crashes a scheduler replica: its connections to the API
// server break at once, so it neither finishes what it had in flight nor
// releases its Lease, which the standby takes once it expires. The
// replica starts again, as a standby, after RestartAfter. It returns once
// the replica's goroutines have stopped.
func (cp *ControlPlane) KillScheduler(name string) error {
	for _, r := range cp.replicas {
		if r.name != name {
			continue
		}
		r.mu.Lock()
		wire, cancel, run := r.wire, r.cancel, r.run
		r.mu.Unlock()
		if run == nil {
			return fmt.Errorf("scheduler replica %s is not running", name)
		}
		wire.Cut()
		cancel()
		<-run.done
		return nil
	}
	return fmt.Errorf("no scheduler replica %s", name)
}
