package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdServer is an embedded single-member etcd.
type etcdServer struct {
	etcd      *embed.Etcd
	clientURL string
}

// startEtcd runs etcd in process with its data under dir. The client and
// peer ports are picked free; a port taken between the probe and the bind
// is retried.
func startEtcd(ctx context.Context, dir string) (*etcdServer, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		srv, err := tryStartEtcd(ctx, filepath.Join(dir, fmt.Sprintf("etcd-%d", attempt)))
		if err == nil {
			return srv, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("start etcd: %w", lastErr)
}

func tryStartEtcd(ctx context.Context, dir string) (*etcdServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "strata"
	// The simulator's etcd is disposable: skipping fsync makes it several
	// times faster on small disks and loses nothing that matters.
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// etcd logs an error for every listener it closes on shutdown; its
	// real failures surface through the API server, so it stays silent.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd did not become ready within 60s")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &etcdServer{etcd: e, clientURL: clientURL.String()}, nil
}

func (s *etcdServer) stop() { s.etcd.Close() }

// freePorts asks the kernel for n free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
