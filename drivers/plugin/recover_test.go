package plugin

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
)

// startWith starts a driver with the backend on node "node-a".
func startWith(t *testing.T, dir string, backend Backend, client *fake.Clientset) (*Driver, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	bootPath := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootPath, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	register()
	d, err := newDriver(Config{DriverName: testDriver, NodeName: "node-a", Backend: backend, KubeClient: client,
		PluginDataDir: dir, CDIDir: filepath.Join(dir, "cdi"), BootIDPath: bootPath})
	if err != nil {
		t.Fatal(err)
	}
	d.recorder = record.NewFakeRecorder(10)
	return d, d.startUp(ctx)
}

// reservedClaim is a claim on node-a's gpu, reserved for a pod.
func reservedClaim(uid, name, device string) *resourceapi.ResourceClaim {
	c := allocatedClaim(uid, name, device)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name + "-pod", UID: types.UID(name + "-pod")}}
	return c
}

func expectEvent(t *testing.T, d *Driver, reason string) string {
	t.Helper()
	select {
	case e := <-d.recorder.(*record.FakeRecorder).Events:
		if !strings.Contains(e, reason) {
			t.Errorf("event %q, want %s", e, reason)
		}
		return e
	default:
		t.Errorf("no %s event", reason)
		return ""
	}
}

// TestUnknownCheckpointVersionIsLeftAlone: a checkpoint written by a
// newer release, met at start-up (a rollback) or while serving (the new
// instance of a rolling update wrote it), is neither replaced nor acted
// on: the plugin refuses to serve, and every CDI spec, device and the
// file stay as they are.
func TestUnknownCheckpointVersionIsLeftAlone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	backend := &reconcilingBackend{fakeBackend: &fakeBackend{devices: gpus("gpu-0", "gpu-1")}}
	client := fake.NewClientset()
	d, err := startWith(t, dir, backend, client)
	if err != nil {
		t.Fatal(err)
	}
	claim := reservedClaim("uid-1", "a", "gpu-0")
	if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim}); res["uid-1"].Err != nil {
		t.Fatal(res["uid-1"].Err)
	}
	raw, err := os.ReadFile(d.store.path)
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Replace(raw, []byte(checkpointVersion), []byte("plugin.strata.sh/checkpoint/v2"), 1)
	if err := os.WriteFile(d.store.path, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	reconciled := backend.reconciles

	// While serving: the next call finds the file changed.
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-2", "b", "gpu-1")})
	if err == nil || !strings.Contains(err.Error(), `"plugin.strata.sh/checkpoint/v2", this plugin reads "plugin.strata.sh/checkpoint/v1"`) {
		t.Errorf("prepare with a newer checkpoint: %v %v, want refused naming both versions", err, res)
	}
	if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-1"}}); err == nil {
		t.Errorf("unprepare with a newer checkpoint succeeded")
	}
	expectEvent(t, d, "CheckpointVersionUnknown")

	// At start-up.
	restarted, err := startWith(t, dir, backend, client)
	if err == nil || !strings.Contains(err.Error(), "refusing to serve") {
		t.Fatalf("start with a newer checkpoint: %v, want refused", err)
	}
	// Start posts the event itself before the process exits.
	restarted.reportRefusal(ctx, err, true)
	events, _ := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if len(events.Items) != 1 || events.Items[0].Reason != "CheckpointVersionUnknown" || events.Items[0].InvolvedObject.Kind != "Node" {
		t.Errorf("events at start-up %+v, want one CheckpointVersionUnknown on the node", events.Items)
	}

	if got, _ := os.ReadFile(d.store.path); !bytes.Equal(got, newer) {
		t.Errorf("the newer checkpoint was changed")
	}
	if moved, _ := filepath.Glob(d.store.path + ".corrupt-*"); len(moved) > 0 {
		t.Errorf("the newer checkpoint was moved aside: %v", moved)
	}
	if _, err := os.Stat(d.cdi.SpecPath("uid-1")); err != nil {
		t.Errorf("the prepared claim's CDI spec is gone: %v", err)
	}
	if len(backend.unprepared) > 0 || backend.reconciles != reconciled {
		t.Errorf("devices released (%v) or reconciled (%d times) from a checkpoint the plugin cannot read", backend.unprepared, backend.reconciles-reconciled)
	}
}

// TestCorruptCheckpointIsRebuiltFromTheAPIServer: a corrupt checkpoint is
// moved aside and the claims reserved on this node whose CDI spec is on
// disk are rebuilt from the API server; nothing is destroyed while they
// are prepared (no reconcile, no spec removed), a rebuilt claim is served
// as prepared and released on unprepare.
func TestCorruptCheckpointIsRebuiltFromTheAPIServer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	backend := &reconcilingBackend{fakeBackend: &fakeBackend{devices: gpus("gpu-0", "gpu-1", "gpu-2")}}
	kept, done, other := reservedClaim("uid-kept", "kept", "gpu-0"), allocatedClaim("uid-done", "done", "gpu-1"), reservedClaim("uid-other", "other", "gpu-2")
	other.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	client := fake.NewClientset(kept, done, other)
	d, err := startWith(t, dir, backend, client)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*resourceapi.ResourceClaim{kept, done} {
		if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); res[c.UID].Err != nil {
			t.Fatal(res[c.UID].Err)
		}
	}
	if err := os.WriteFile(d.store.path, []byte(`{"version":"`+checkpointVersion+`","checksum":"00","data":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	reconciled := backend.reconciles

	restarted, err := startWith(t, dir, backend, client)
	if err != nil {
		t.Fatal(err)
	}
	ev := expectEvent(t, restarted, "CheckpointCorrupt")
	if !strings.Contains(ev, "1 prepared claims were rebuilt from the API server") {
		t.Errorf("event %q, want the rebuilt claims counted", ev)
	}
	st := restarted.state.Claims["uid-kept"]
	if len(restarted.state.Claims) != 1 || st == nil || !st.Recovered || st.Phase != PhasePrepareCompleted || st.Devices[0].Device != "gpu-0" {
		t.Fatalf("rebuilt claims %v, want kept's, recovered and prepared", restarted.state.Claims)
	}
	if backend.reconciles != reconciled || len(backend.unprepared) > 0 {
		t.Errorf("reconciled %d times, released %v while rebuilt claims are prepared", backend.reconciles-reconciled, backend.unprepared)
	}
	for _, uid := range []string{"uid-kept", "uid-done"} {
		if _, err := os.Stat(restarted.cdi.SpecPath(uid)); err != nil {
			t.Errorf("CDI spec of %s removed from a rebuilt state: %v", uid, err)
		}
	}
	// The rebuilt claim counts against a second allocation of its GPU.
	res, _ := restarted.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocatedClaim("uid-dup", "dup", "gpu-0")})
	if res["uid-dup"].Err == nil {
		t.Errorf("a second claim on the rebuilt claim's GPU was prepared")
	}
	// The kubelet asking again gets the prepared devices.
	prepared := len(backend.prepared["uid-kept"])
	res, _ = restarted.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{kept})
	if res["uid-kept"].Err != nil || len(res["uid-kept"].Devices) != 1 || len(backend.prepared["uid-kept"]) != prepared {
		t.Errorf("prepare of the rebuilt claim: %+v, backend prepared it again: %v", res["uid-kept"], len(backend.prepared["uid-kept"]) != prepared)
	}
	if r, _ := restarted.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-kept"}}); r["uid-kept"] != nil {
		t.Fatal(r["uid-kept"])
	}
	if released := backend.released["uid-kept"]; len(released) != 1 || released[0].Device != "gpu-0" {
		t.Errorf("unprepare of the rebuilt claim released %v, want gpu-0", released)
	}
}

// TestLostCheckpointWithoutTheAPIServerRefusesToServe: with the checkpoint
// corrupt or missing while CDI specs are on disk, and the API server not
// answering, the plugin does not start from an empty state.
func TestLostCheckpointWithoutTheAPIServerRefusesToServe(t *testing.T) {
	for _, lose := range []string{"corrupt", "missing"} {
		t.Run(lose, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			backend := &reconcilingBackend{fakeBackend: &fakeBackend{devices: gpus("gpu-0")}}
			client := fake.NewClientset()
			d, err := startWith(t, dir, backend, client)
			if err != nil {
				t.Fatal(err)
			}
			if res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{reservedClaim("uid-1", "a", "gpu-0")}); res["uid-1"].Err != nil {
				t.Fatal(res["uid-1"].Err)
			}
			if lose == "corrupt" {
				err = os.WriteFile(d.store.path, []byte("{"), 0o600)
			} else {
				err = os.Remove(d.store.path)
			}
			if err != nil {
				t.Fatal(err)
			}
			client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("connection refused")
			})
			reconciled := backend.reconciles
			if _, err := startWith(t, dir, backend, client); err == nil || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("start: %v, want refused with the API error", err)
			}
			if _, err := os.Stat(d.cdi.SpecPath("uid-1")); err != nil {
				t.Errorf("CDI spec removed: %v", err)
			}
			if backend.reconciles != reconciled || len(backend.unprepared) > 0 {
				t.Errorf("hardware reconciled or released from an empty state")
			}
		})
	}
}
