package jobpreempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
)

// patches records the nominated node of every status patch of a pod that
// reaches the fake API ("" clears it), by pod name, and can refuse them.
type patches struct {
	mu     sync.Mutex
	byPod  map[string][]string
	refuse int // how many more patches to refuse
	block  chan struct{}
}

func recordPatches(t *testing.T, h *fakeHost) *patches {
	t.Helper()
	p := &patches{byPod: map[string][]string{}}
	h.cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetSubresource() != "status" {
			return false, nil, nil
		}
		var body struct {
			Status struct {
				NominatedNodeName *string `json:"nominatedNodeName"`
			} `json:"status"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
			return true, nil, err
		}
		p.mu.Lock()
		block := p.block
		p.mu.Unlock()
		if block != nil {
			<-block
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.refuse > 0 {
			p.refuse--
			return true, nil, errors.New("etcd is down")
		}
		node := ""
		if body.Status.NominatedNodeName != nil {
			node = *body.Status.NominatedNodeName
		}
		p.byPod[pa.GetName()] = append(p.byPod[pa.GetName()], node)
		return false, nil, nil
	})
	return p
}

func (p *patches) get() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]string{}
	for k, v := range p.byPod {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// fastWriter replaces j's writer with one whose retries are fast and
// runs it until the test ends.
func fastWriter(t *testing.T, j *Preemptor) {
	t.Helper()
	j.writer = newNominationWriter(j.host.Client, j.pods, workqueue.NewTypedItemExponentialFailureRateLimiter[podKey](time.Millisecond, 10*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { j.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the nomination writer did not stop")
		}
	})
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return f(), nil
	}); err != nil {
		t.Fatalf("never: %s", what)
	}
}

// Begin returns at once, whatever the API does: the members' nominated
// nodes of a 512-member gang are written by the writer's workers while
// the scheduling loop goes on, each once, retried when refused.
func TestNominationsWrittenOffTheLoop(t *testing.T) {
	var members []*corev1.Pod
	for i := range 512 {
		members = append(members, pod(fmt.Sprintf("hp-%d", i), "hp", ""))
	}
	j, h := newTestPreemptor(t, nil, members...)
	rec := recordPatches(t, h)
	rec.block = make(chan struct{})
	rec.refuse = 20
	fastWriter(t, j)

	want := map[*corev1.Pod]string{}
	for i, m := range members {
		want[m] = fmt.Sprintf("node-%d", i%64)
	}
	start := time.Now()
	j.Begin(context.Background(), "default/hp", NewNomination(1000, map[string]int{"node-0": 8}), nil, want, nil, "")
	if took := time.Since(start); took > time.Second {
		t.Errorf("Begin took %s with the API blocked; it must not wait for the writes", took)
	}
	close(rec.block)
	waitFor(t, "every member's nominated node written", func() bool { return len(rec.get()) == len(members) })
	for i, m := range members {
		if got := rec.get()[m.Name]; !cmp.Equal(got, []string{fmt.Sprintf("node-%d", i%64)}) {
			t.Fatalf("%s: writes %v, want its node once", m.Name, got)
		}
	}
}

// The writer keeps the last wanted node per pod: changes made while a
// write is refused end with the last one, written once; clearing a
// nomination the API took writes null; a pod gone or recreated under its
// name, or bound, is not written.
func TestNominationWriterLastWriteWins(t *testing.T) {
	a, b, c, d := pod("a", "hp", ""), pod("b", "hp", ""), pod("c", "hp", ""), pod("d", "hp", "")
	j, h := newTestPreemptor(t, nil, a, b, c, d)
	rec := recordPatches(t, h)
	rec.mu.Lock()
	rec.refuse = 1000 // the API down while the wants change
	rec.mu.Unlock()
	fastWriter(t, j)

	j.writer.want(a, "node-1")
	j.writer.want(a, "node-2")
	j.writer.want(b, "node-1")
	// c is recreated under its name: the writer must not nominate the
	// new pod.
	c2 := c.DeepCopy()
	c2.UID = types.UID("c-2")
	j.writer.want(c, "node-1")
	if err := h.pods.Update(c2); err != nil {
		t.Fatal(err)
	}
	// d is bound meanwhile.
	j.writer.want(d, "node-3")
	d2 := d.DeepCopy()
	d2.Spec.NodeName = "node-3"
	if err := h.pods.Update(d2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "writes refused", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.refuse <= 995 })
	rec.mu.Lock()
	rec.refuse = 0
	rec.mu.Unlock()
	waitFor(t, "a and b written", func() bool { g := rec.get(); return len(g["a"]) > 0 && len(g["b"]) > 0 })
	j.writer.want(b, "")
	waitFor(t, "b cleared", func() bool { return len(rec.get()["b"]) == 2 })
	want := map[string][]string{"a": {"node-2"}, "b": {"node-1", ""}}
	if diff := cmp.Diff(want, rec.get()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if j.writer.nominates(b.UID) || !j.writer.nominates(a.UID) {
		t.Errorf("the writer's view: a nominated %v, b %v; want a only", j.writer.nominates(a.UID), j.writer.nominates(b.UID))
	}
}
