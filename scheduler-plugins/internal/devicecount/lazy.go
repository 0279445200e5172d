package devicecount

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Lazy gives a plugin's Score the state its PreScore would have written.
// kube-scheduler runs PreScore only where the profile enables the plugin
// at preScore (or multiPoint), and Koordinator's documented configuration
// enables these plugins at score alone. Then the first Score of a cycle
// prepares the state for every node of the snapshot and stores it in the
// cycle state; the cycle's other Score calls, which run in parallel, wait
// for it and read it.
type Lazy[S fwk.StateData] struct {
	Key     fwk.StateKey
	Handle  fwk.Handle
	Prepare func(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (S, error)

	mu sync.Mutex
}

// Get returns the cycle's state, preparing it if PreScore did not.
// Without a snapshot (a handle-less test) it prepares the state for the
// one node and stores nothing.
func (l *Lazy[S]) Get(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (S, error) {
	if s, ok := l.read(cs); ok {
		return s, nil
	}
	var lister fwk.SharedLister
	if l.Handle != nil {
		lister = l.Handle.SnapshotSharedLister()
	}
	if lister == nil {
		return l.Prepare(ctx, cs, pod, []fwk.NodeInfo{ni})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.read(cs); ok {
		return s, nil
	}
	var zero S
	nodes, err := lister.NodeInfos().List()
	if err != nil {
		return zero, fmt.Errorf("list nodes: %w", err)
	}
	s, err := l.Prepare(ctx, cs, pod, nodes)
	if err != nil {
		return zero, err
	}
	cs.Write(l.Key, s)
	return s, nil
}

func (l *Lazy[S]) read(cs fwk.CycleState) (S, bool) {
	var zero S
	data, err := cs.Read(l.Key)
	if err != nil {
		return zero, false
	}
	s, ok := data.(S)
	return s, ok
}
