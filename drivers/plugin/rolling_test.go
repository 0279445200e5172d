package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/strata-sh/strata/cdi"
)

// fakeHardware is the node's devices as every instance of the plugin on
// it sees them. It records each device taken by two claims at once.
type fakeHardware struct {
	mu          sync.Mutex
	holder      map[string]types.UID
	doubleTaken []string
}

func (h *fakeHardware) take(claim types.UID, devices []AllocatedDevice) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holder == nil {
		h.holder = map[string]types.UID{}
	}
	for _, d := range devices {
		if other, ok := h.holder[d.Device]; ok && other != claim {
			h.doubleTaken = append(h.doubleTaken, fmt.Sprintf("%s by %s and %s", d.Device, other, claim))
		}
		h.holder[d.Device] = claim
	}
}

func (h *fakeHardware) release(claim types.UID, devices []PreparedDevice) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range devices {
		if h.holder[d.Device] == claim {
			delete(h.holder, d.Device)
		}
	}
}

func (h *fakeHardware) conflicts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.doubleTaken)
}

// reconcilingBackend is a fakeBackend that, like a backend with hardware
// state of its own, remembers the claims it was last reconciled with.
type reconcilingBackend struct {
	*fakeBackend
	restored   []string
	reconciled []string
	// reconciles counts the calls: each is a chance to destroy what a
	// running pod uses.
	reconciles int
}

func (b *reconcilingBackend) Restore(_ context.Context, claims []ClaimState) {
	b.restored = stateUIDs(claims)
}

func (b *reconcilingBackend) Reconcile(_ context.Context, prepared []ClaimState) error {
	b.reconciled = stateUIDs(prepared)
	b.reconciles++
	return nil
}

func stateUIDs(claims []ClaimState) []string {
	out := []string{}
	for _, c := range claims {
		out = append(out, string(c.UID))
	}
	slices.Sort(out)
	return out
}

// testNode is the directories of one node that the instances of a
// plugin on it share.
type testNode struct {
	pluginDir, registrarDir, cdiDir, bootIDPath string
}

func newTestNode(t *testing.T) testNode {
	t.Helper()
	// Unix socket paths are short; t.TempDir's can be too long.
	root, err := os.MkdirTemp("", "strata-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	n := testNode{
		pluginDir:    filepath.Join(root, "plugin"),
		registrarDir: filepath.Join(root, "registry"),
		cdiDir:       filepath.Join(root, "cdi"),
		bootIDPath:   filepath.Join(root, "boot_id"),
	}
	if err := os.WriteFile(n.bootIDPath, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// config is the configuration of an instance of the plugin in the pod
// with the given UID. Each instance gets an API server of its own: the
// fake one names no slices, so two instances publishing to one would
// replace each other's slices over and over.
func (n testNode) config(backend Backend, podUID types.UID) Config {
	return Config{
		DriverName: testDriver, NodeName: "node-a", NodeUID: "node-a-uid", KubeClient: fake.NewClientset(), Backend: backend,
		PluginDataDir: n.pluginDir, RegistrarDir: n.registrarDir, CDIDir: n.cdiDir, BootIDPath: n.bootIDPath,
		RollingUpdateUID: podUID,
	}
}

// start starts an instance of the plugin in the pod with the given UID.
func (n testNode) start(ctx context.Context, t *testing.T, backend Backend, podUID types.UID) *Driver {
	t.Helper()
	d, err := Start(ctx, n.config(backend, podUID))
	if err != nil {
		t.Fatalf("start instance %s: %v", podUID, err)
	}
	t.Cleanup(d.Stop)
	return d
}

// checkpointClaims reads the claims of the checkpoint on disk with their
// phase.
func (n testNode) checkpointClaims(t *testing.T) map[string]Phase {
	t.Helper()
	data, err := (&checkpointStore{path: filepath.Join(n.pluginDir, "checkpoint.json")}).load()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Phase{}
	for uid, c := range data.Claims {
		out[string(uid)] = c.Phase
	}
	return out
}

// specs lists the claims with a CDI spec on disk.
func (n testNode) specs(t *testing.T) []string {
	t.Helper()
	w, err := cdi.NewWriter(testDriver, n.cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	uids, err := w.ClaimUIDs()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(uids)
	return uids
}

func prepare(ctx context.Context, t *testing.T, d *Driver, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t.Helper()
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return nil, err
	}
	return res[claim.UID].Devices, res[claim.UID].Err
}

func unprepare(ctx context.Context, d *Driver, uid types.UID) error {
	res, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: uid}})
	if err != nil {
		return err
	}
	return res[uid]
}

// TestRollingUpdateHandsOverPreparedClaims: during a rolling update the
// new instance starts beside the old one, each with sockets of its own.
// A claim that the old one prepared is prepared already for the new one,
// with the same devices; the new one unprepares it with the state the old
// one recorded, and the old one then sees it unprepared, as does its
// backend, also before it republishes its devices.
func TestRollingUpdateHandsOverPreparedClaims(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := newTestNode(t)
	hw := &fakeHardware{}
	oldBackend := &reconcilingBackend{fakeBackend: &fakeBackend{devices: gpus("gpu-0", "gpu-1"), hw: hw}}
	newBackend := &reconcilingBackend{fakeBackend: &fakeBackend{devices: gpus("gpu-0", "gpu-1"), hw: hw}}
	old := node.start(ctx, t, oldBackend, "old")
	claim := allocatedClaim("uid-1", "train", "gpu-0")
	oldDevices, err := prepare(ctx, t, old, claim)
	if err != nil {
		t.Fatalf("prepare on the old instance: %v", err)
	}
	spec, err := os.ReadFile(old.cdi.SpecPath("uid-1"))
	if err != nil {
		t.Fatal(err)
	}

	updated := node.start(ctx, t, newBackend, "new")
	for _, uid := range []types.UID{"old", "new"} {
		sockets := []string{
			filepath.Join(node.pluginDir, "dra-"+string(uid)+".sock"),
			filepath.Join(node.registrarDir, kubeletplugin.RollingUpdateRegistrarSocketFile(node.registrarDir, testDriver, uid)),
		}
		for _, s := range sockets {
			if _, err := os.Stat(s); err != nil {
				t.Errorf("socket of instance %s: %v", uid, err)
			}
		}
	}
	if after, err := os.ReadFile(updated.cdi.SpecPath("uid-1")); err != nil || string(after) != string(spec) {
		t.Errorf("CDI spec of the prepared claim after the new instance started: %v\n%s", err, after)
	}
	if diff := cmp.Diff([]string{"uid-1"}, newBackend.reconciled); diff != "" {
		t.Errorf("new instance's backend reconciled with (-want +got):\n%s", diff)
	}

	newDevices, err := prepare(ctx, t, updated, claim)
	if err != nil {
		t.Fatalf("prepare on the new instance: %v", err)
	}
	if diff := cmp.Diff(oldDevices, newDevices); diff != "" {
		t.Errorf("devices from the new instance (-old +new):\n%s", diff)
	}
	if len(newBackend.prepared) != 0 {
		t.Errorf("new instance prepared %v again", newBackend.prepared)
	}

	if err := unprepare(ctx, updated, "uid-1"); err != nil {
		t.Fatalf("unprepare on the new instance: %v", err)
	}
	if got := newBackend.released["uid-1"]; len(got) != 1 || string(got[0].State) != `{"handle":"gpu-0"}` {
		t.Errorf("new instance released %+v, want gpu-0 with the state the old instance recorded", got)
	}
	if got := node.specs(t); len(got) != 0 {
		t.Errorf("CDI specs after unprepare: %v", got)
	}
	if got := node.checkpointClaims(t); len(got) != 0 {
		t.Errorf("checkpoint after unprepare: %v", got)
	}

	// The old instance follows: gpu-0 is free for another claim, and
	// unpreparing the claim again is a no-op that reaches no hardware.
	if _, err := prepare(ctx, t, old, allocatedClaim("uid-2", "eval", "gpu-0")); err != nil {
		t.Fatalf("old instance prepares gpu-0 for another claim: %v", err)
	}
	if diff := cmp.Diff([]string{}, oldBackend.reconciled); diff != "" {
		t.Errorf("old instance's backend reconciled with (-want +got):\n%s", diff)
	}
	if err := unprepare(ctx, old, "uid-1"); err != nil {
		t.Errorf("unprepare again on the old instance: %v", err)
	}
	if slices.Contains(oldBackend.unprepared, "uid-1") {
		t.Errorf("old instance released uid-1 a second time")
	}
	if diff := cmp.Diff(map[string]Phase{"uid-2": PhasePrepareCompleted}, node.checkpointClaims(t)); diff != "" {
		t.Errorf("checkpoint (-want +got):\n%s", diff)
	}

	// A republish of the old instance (after a health change) hands its
	// backend the claims the new one prepared before it discovers: what
	// a backend publishes may depend on them (MIG instances it made).
	if _, err := prepare(ctx, t, updated, allocatedClaim("uid-3", "serve", "gpu-1")); err != nil {
		t.Fatalf("prepare on the new instance: %v", err)
	}
	if err := old.Republish(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"uid-2", "uid-3"}, oldBackend.reconciled); diff != "" {
		t.Errorf("old instance's backend reconciled before republishing with (-want +got):\n%s", diff)
	}
	if got := hw.conflicts(); len(got) != 0 {
		t.Errorf("devices taken twice: %v", got)
	}
}

// TestRollingUpdateConcurrentPrepares: both instances prepare and
// unprepare at the same time. Two claims on one device: exactly one gets
// it, the other is refused naming it. Claims on different devices: both
// are prepared and both stay in the checkpoint. No device is ever taken
// twice, whichever instance unprepares.
func TestRollingUpdateConcurrentPrepares(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := newTestNode(t)
	hw := &fakeHardware{}
	a := node.start(ctx, t, &fakeBackend{devices: gpus("gpu-0", "gpu-1", "gpu-2"), hw: hw}, "old")
	b := node.start(ctx, t, &fakeBackend{devices: gpus("gpu-0", "gpu-1", "gpu-2"), hw: hw}, "new")

	// both runs fa on a and fb on b at once.
	both := func(fa func(*Driver) error, fb func(*Driver) error) (errA, errB error) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; errA = fa(a) }()
		go func() { defer wg.Done(); <-start; errB = fb(b) }()
		close(start)
		wg.Wait()
		return errA, errB
	}
	prepareOn := func(claim *resourceapi.ResourceClaim) func(*Driver) error {
		return func(d *Driver) error { _, err := prepare(ctx, t, d, claim); return err }
	}
	unprepareOn := func(uid types.UID) func(*Driver) error {
		return func(d *Driver) error { return unprepare(ctx, d, uid) }
	}

	for i := 0; i < 20; i++ {
		ca := allocatedClaim("uid-1", fmt.Sprintf("a%d", i), "gpu-0")
		cb := allocatedClaim("uid-2", fmt.Sprintf("b%d", i), "gpu-0")
		errA, errB := both(prepareOn(ca), prepareOn(cb))
		winner, loser, errLoser := "uid-1", cb.Name, errB
		if errA != nil {
			winner, loser, errLoser = "uid-2", ca.Name, errA
			if errB != nil {
				t.Fatalf("round %d: both prepares of gpu-0 failed: %v; %v", i, errA, errB)
			}
		}
		winnerName := ca.Name
		if winner == "uid-2" {
			winnerName = cb.Name
		}
		if errLoser == nil || !strings.Contains(errLoser.Error(), "already prepared for claim ns/"+winnerName) {
			t.Fatalf("round %d: claim %s got gpu-0 too, or failed otherwise: %v", i, loser, errLoser)
		}
		if diff := cmp.Diff(map[string]Phase{winner: PhasePrepareCompleted}, node.checkpointClaims(t)); diff != "" {
			t.Fatalf("round %d: checkpoint after competing prepares (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff([]string{winner}, node.specs(t)); diff != "" {
			t.Fatalf("round %d: CDI specs after competing prepares (-want +got):\n%s", i, diff)
		}
		// Each instance unprepares the claims, whoever prepared them.
		if errA, errB := both(unprepareOn("uid-1"), unprepareOn("uid-2")); errA != nil || errB != nil {
			t.Fatalf("round %d: unprepare: %v; %v", i, errA, errB)
		}

		ca, cb = allocatedClaim("uid-1", "c", "gpu-1"), allocatedClaim("uid-2", "d", "gpu-2")
		if errA, errB := both(prepareOn(ca), prepareOn(cb)); errA != nil || errB != nil {
			t.Fatalf("round %d: prepares of different devices: %v; %v", i, errA, errB)
		}
		want := map[string]Phase{"uid-1": PhasePrepareCompleted, "uid-2": PhasePrepareCompleted}
		if diff := cmp.Diff(want, node.checkpointClaims(t)); diff != "" {
			t.Fatalf("round %d: checkpoint after prepares of different devices (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff([]string{"uid-1", "uid-2"}, node.specs(t)); diff != "" {
			t.Fatalf("round %d: CDI specs after prepares of different devices (-want +got):\n%s", i, diff)
		}
		if errA, errB := both(unprepareOn("uid-2"), unprepareOn("uid-1")); errA != nil || errB != nil {
			t.Fatalf("round %d: unprepare: %v; %v", i, errA, errB)
		}
		if got := node.checkpointClaims(t); len(got) != 0 {
			t.Fatalf("round %d: checkpoint after unprepare: %v", i, got)
		}
		if got := node.specs(t); len(got) != 0 {
			t.Fatalf("round %d: CDI specs after unprepare: %v", i, got)
		}
	}
	if got := hw.conflicts(); len(got) != 0 {
		t.Errorf("devices taken twice: %v", got)
	}
}

// TestNewInstanceWaitsForPrepareInProgress: a new instance that starts
// while the old one is in the middle of a prepare waits for it, instead
// of rolling the prepare back as interrupted or removing its CDI spec as
// an orphan.
func TestNewInstanceWaitsForPrepareInProgress(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := newTestNode(t)
	entered, proceed := make(chan struct{}), make(chan struct{})
	oldBackend := &fakeBackend{devices: gpus("gpu-0"), beforePrepare: func(types.UID) {
		close(entered)
		<-proceed
	}}
	old := node.start(ctx, t, oldBackend, "old")
	type result struct {
		devices []kubeletplugin.Device
		err     error
	}
	prepared := make(chan result, 1)
	claim := allocatedClaim("uid-1", "train", "gpu-0")
	go func() {
		devices, err := prepare(ctx, t, old, claim)
		prepared <- result{devices, err}
	}()
	<-entered

	newBackend := &fakeBackend{devices: gpus("gpu-0")}
	type started struct {
		d   *Driver
		err error
	}
	startedCh := make(chan started, 1)
	go func() {
		d, err := Start(ctx, node.config(newBackend, "new"))
		startedCh <- started{d, err}
	}()
	select {
	case s := <-startedCh:
		if s.d != nil {
			s.d.Stop()
		}
		t.Fatalf("new instance started while the old one was preparing (error %v)", s.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(proceed)
	r := <-prepared
	if r.err != nil {
		t.Fatalf("prepare on the old instance: %v", r.err)
	}
	s := <-startedCh
	if s.err != nil {
		t.Fatalf("start new instance: %v", s.err)
	}
	t.Cleanup(s.d.Stop)

	if len(newBackend.unprepared) != 0 {
		t.Errorf("new instance rolled back %v", newBackend.unprepared)
	}
	if diff := cmp.Diff([]string{"uid-1"}, node.specs(t)); diff != "" {
		t.Errorf("CDI specs after the new instance started (-want +got):\n%s", diff)
	}
	devices, err := prepare(ctx, t, s.d, claim)
	if err != nil {
		t.Fatalf("prepare on the new instance: %v", err)
	}
	if diff := cmp.Diff(r.devices, devices); diff != "" {
		t.Errorf("devices from the new instance (-old +new):\n%s", diff)
	}
}

// TestLockHeldElsewhere: while another instance holds the lock, prepare
// waits, and gives up with an error that says so when the kubelet's call
// ends; once that instance lets go (or dies), prepare goes through.
func TestLockHeldElsewhere(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	d := newTestDriver(t, dir, &fakeBackend{devices: gpus("gpu-0")}, "boot-1")
	fd, err := unix.Open(filepath.Join(dir, lockFileName), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("lock file: %v", err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	claim := allocatedClaim("uid-1", "train", "gpu-0")
	callCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = d.PrepareResourceClaims(callCtx, []*resourceapi.ResourceClaim{claim})
	if err == nil || !strings.Contains(err.Error(), "held by another instance of the plugin") {
		t.Errorf("prepare while the lock is held elsewhere: %v", err)
	}
	if _, err := os.Stat(d.cdi.SpecPath("uid-1")); !os.IsNotExist(err) {
		t.Errorf("CDI spec written without the lock: %v", err)
	}

	unix.Close(fd) // the holder exits
	if _, err := prepare(ctx, t, d, claim); err != nil {
		t.Errorf("prepare after the lock was released: %v", err)
	}
}
