package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"

	restclient "k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// stableAccess is how clients reach an API server that may restart: the
// API server's own loopback credentials (a token and a certificate made
// at each start) would not outlive it, so clients authenticate with a
// token from a file and trust a serving certificate in the certificate
// directory, both made once and reused by every start.
type stableAccess struct {
	tokenFile string
	token     string
	caPEM     []byte
}

// stableAdmin is the user of the stable token, with the powers of the
// API server's own loopback user.
const stableAdmin = "strata-sim-admin"

// writeStableAccess makes (or, on a restart, reads) the token file and
// the serving certificate kube-apiserver picks up from dir (its pair
// "apiserver").
func writeStableAccess(dir string) (*stableAccess, error) {
	s := &stableAccess{tokenFile: filepath.Join(dir, "tokens.csv")}
	certFile, keyFile := filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	if ok, _ := certutil.CanReadCertAndKey(certFile, keyFile); !ok {
		cert, key, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
		if err := certutil.WriteCert(certFile, cert); err != nil {
			return nil, err
		}
		if err := keyutil.WriteKey(keyFile, key); err != nil {
			return nil, err
		}
	}
	var err error
	if s.caPEM, err = os.ReadFile(certFile); err != nil {
		return nil, err
	}
	tokenPath := filepath.Join(dir, "admin.token")
	if b, err := os.ReadFile(tokenPath); err == nil {
		s.token = string(b)
	} else {
		buf := make([]byte, 16)
		if _, err := rand.Read(buf); err != nil {
			return nil, err
		}
		s.token = hex.EncodeToString(buf)
		if err := os.WriteFile(tokenPath, []byte(s.token), 0o600); err != nil {
			return nil, err
		}
	}
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", s.token, stableAdmin, stableAdmin)
	if err := os.WriteFile(s.tokenFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return s, nil
}

// apply points a copy of the loopback configuration at the stable
// credentials (same address).
func (s *stableAccess) apply(c *restclient.Config) {
	c.BearerToken, c.BearerTokenFile = s.token, ""
	c.TLSClientConfig = restclient.TLSClientConfig{CAData: s.caPEM}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// port and etcd, as a rolling update or a crash of the API server would;
// it returns once the new one is ready. Clients see their connections
// break and reconnect with the credentials they had. It needs
// Options.APIServerRestarts.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if !cp.opts.APIServerRestarts {
		return fmt.Errorf("the control plane was started without APIServerRestarts")
	}
	cp.apiMu.Lock()
	defer cp.apiMu.Unlock()
	cp.apiStop()
	cp.api.wait()
	klog.FromContext(ctx).V(1).Info("API server stopped; starting it again", "port", cp.api.port)
	return cp.startAPIServer(cp.api.port)
}

// StopAPIServer stops kube-apiserver until StartAPIServer, for tests
// that need it down for a while.
func (cp *ControlPlane) StopAPIServer() error {
	if !cp.opts.APIServerRestarts {
		return fmt.Errorf("the control plane was started without APIServerRestarts")
	}
	cp.apiMu.Lock()
	defer cp.apiMu.Unlock()
	cp.apiStop()
	cp.api.wait()
	return nil
}

// StartAPIServer starts again the API server StopAPIServer stopped.
func (cp *ControlPlane) StartAPIServer() error {
	cp.apiMu.Lock()
	defer cp.apiMu.Unlock()
	return cp.startAPIServer(cp.api.port)
}

// startAPIServer starts kube-apiserver on port (0: a free one) under the
// control plane's context; callers hold apiMu.
func (cp *ControlPlane) startAPIServer(port int) error {
	ctx, cancel := context.WithCancel(cp.ctx)
	api, err := startAPIServer(ctx, cp.Dir, cp.etcd.clientURL, port, cp.opts)
	if err != nil {
		cancel()
		return err
	}
	cp.api, cp.apiStop = api, cancel
	return nil
}
