package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// File names of the serving certificate, in the Secret and in CertDir
// (cert-controller's and controller-runtime's defaults).
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
)

// certWriter copies the serving certificate that cert-controller keeps in
// the Secret into CertDir, where the webhook server reads it (and
// re-reads it when it changes): cert-controller only writes the Secret,
// and a mounted Secret volume shows a change only a minute or so later,
// so a writable CertDir (an emptyDir) is filled at once. When CertDir is
// the Secret mounted read-only, the files are the same once the kubelet
// has synced them and nothing is written.
type certWriter struct {
	client.Reader
	secret types.NamespacedName
	dir    string
}

// SetupWithManager watches the one Secret, on every replica (each serves
// the webhook).
func (w *certWriter) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("webhook-certificates").
		For(&corev1.Secret{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == w.secret.Namespace && o.GetName() == w.secret.Name
		}))).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(w)
}

// Reconcile writes the key, then the certificate, when they differ from
// the files.
func (w *certWriter) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var s corev1.Secret
	if err := w.Get(ctx, w.secret, &s); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cert, key := s.Data[certFile], s.Data[keyFile]
	if len(cert) == 0 || len(key) == 0 {
		return reconcile.Result{}, nil // not issued yet
	}
	// The key first: whoever sees the new certificate finds its key.
	for _, f := range []struct {
		name string
		data []byte
	}{{keyFile, key}, {certFile, cert}} {
		if err := writeIfChanged(filepath.Join(w.dir, f.name), f.data); err != nil {
			return reconcile.Result{}, fmt.Errorf("write webhook certificate from Secret %s: %w", w.secret, err)
		}
	}
	return reconcile.Result{}, nil
}

// writeIfChanged replaces path with data, atomically, unless it holds
// data already.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
