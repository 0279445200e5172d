package controller

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/strata-sh/strata/controller/admission"
)

// writeCert puts a self-signed serving certificate for 127.0.0.1 in dir.
func writeCert(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The webhook server waits for its certificates, is not ready until it
// serves, then answers an AdmissionReview over TLS.
func TestWebhookServerServesOnceCertificatesAreReady(t *testing.T) {
	dir := t.TempDir()
	o := WebhookOptions{Port: freePort(t), Host: "127.0.0.1", CertDir: dir}
	ready := make(chan struct{})
	srv := newWebhookServer(o, ready)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()

	check := srv.StartedChecker()
	if err := check(nil); err == nil || !strings.Contains(err.Error(), "certificates are not ready") {
		t.Fatalf("readiness before the certificates: %v", err)
	}
	writeCert(t, dir)
	close(ready)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return check(nil) == nil, nil
	}); err != nil {
		t.Fatalf("not ready: %v", check(nil))
	}

	review := admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: "1", Operation: admissionv1.Create,
		Object: runtime.RawExtension{Raw: []byte(`{"metadata":{"name":"p","namespace":"ml","annotations":{"scheduling.strata.sh/waiting-time":"soon"}}}`)},
	}}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	must(t, err)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Post("https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port))+admission.PodsPath, "application/json", bytes.NewReader(body))
	must(t, err)
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	must(t, json.NewDecoder(resp.Body).Decode(&out))
	if out.Response == nil || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "metadata.annotations[scheduling.strata.sh/waiting-time]") {
		t.Errorf("response %+v, want the pod refused naming the annotation", out.Response)
	}
}

// With no port there is no webhook server: a disabled one, should anyone
// ask the manager for it, and no cache settings for Secrets.
func TestNoWebhookByDefault(t *testing.T) {
	srv := newWebhookServer(WebhookOptions{}, nil)
	if err := srv.Start(context.Background()); err != nil {
		t.Errorf("disabled server: %v", err)
	}
	if c := webhookCache(WebhookOptions{}); c.ByObject != nil {
		t.Errorf("cache options without a webhook: %+v", c)
	}
	if c := webhookCache(WebhookOptions{Port: 9443, ManageCertificates: true, Namespace: "strata-system", ConfigName: "strata-validation"}); len(c.ByObject) != 2 {
		t.Errorf("cache options managing certificates: %+v", c)
	}
}

// The certificate in the Secret lands in CertDir, and is rewritten only
// when it changes.
func TestCertWriterCopiesTheSecret(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "strata-system", Name: "certs"}}
	c := fake.NewClientBuilder().WithObjects(secret).Build()
	dir := filepath.Join(t.TempDir(), "certs")
	w := &certWriter{Reader: c, secret: types.NamespacedName{Namespace: "strata-system", Name: "certs"}, dir: dir}
	reconcileCerts := func() {
		t.Helper()
		_, err := w.Reconcile(context.Background(), reconcile.Request{})
		must(t, err)
	}
	reconcileCerts()
	if _, err := os.Stat(filepath.Join(dir, certFile)); !os.IsNotExist(err) {
		t.Fatalf("certificate written before the Secret holds one: %v", err)
	}

	secret.Data = map[string][]byte{certFile: []byte("cert-1"), keyFile: []byte("key-1"), "ca.crt": []byte("ca")}
	must(t, c.Update(context.Background(), secret))
	reconcileCerts()
	for name, want := range map[string]string{certFile: "cert-1", keyFile: "key-1"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	before, err := os.Stat(filepath.Join(dir, certFile))
	must(t, err)
	reconcileCerts()
	after, err := os.Stat(filepath.Join(dir, certFile))
	must(t, err)
	if !os.SameFile(before, after) {
		t.Error("an unchanged certificate was rewritten")
	}

	secret.Data[certFile] = []byte("cert-2")
	must(t, c.Update(context.Background(), secret))
	reconcileCerts()
	if got, _ := os.ReadFile(filepath.Join(dir, certFile)); string(got) != "cert-2" {
		t.Errorf("rotated certificate: %q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the certificate directory, want 2 (no temporary files left)", len(entries))
	}
}
