package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// draPluginType is the plugin type DRA drivers register with.
const draPluginType = "DRAPlugin"

// pluginClients discovers kubelet plugins the way kubelet's plugin watcher
// does: every socket in the registration directory is asked GetInfo, told
// the registration outcome, and its DRA endpoint is dialled.
type pluginClients struct {
	registryDir string
	// ctx ends the health watches when the node stops.
	ctx    context.Context
	cancel context.CancelFunc
	// health receives the plugins' device health; healthChanged is told
	// which devices changed.
	health        *healthCache
	healthChanged func([]deviceKey)

	mu      sync.Mutex
	drivers map[string]*driverConn // by driver name
}

type driverConn struct {
	endpoint string
	conn     *grpc.ClientConn
	client   drapb.DRAPluginClient
}

func newPluginClients(ctx context.Context, registryDir string, health *healthCache, changed func([]deviceKey)) *pluginClients {
	ctx, cancel := context.WithCancel(ctx)
	return &pluginClients{registryDir: registryDir, ctx: ctx, cancel: cancel, health: health, healthChanged: changed, drivers: map[string]*driverConn{}}
}

// scan registers the plugins whose sockets are in the registration
// directory now, as kubelet's plugin watcher does when a socket appears.
func (p *pluginClients) scan(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.scanLocked(ctx)
}

// client returns the DRA client of a driver, registering plugins that
// appeared since the last call.
func (p *pluginClients) client(ctx context.Context, driver string) (drapb.DRAPluginClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.drivers[driver]; ok {
		return d.client, nil
	}
	if err := p.scanLocked(ctx); err != nil {
		return nil, err
	}
	if d, ok := p.drivers[driver]; ok {
		return d.client, nil
	}
	return nil, fmt.Errorf("DRA driver %s is not registered with this node", driver)
}

func (p *pluginClients) scanLocked(ctx context.Context) error {
	entries, err := os.ReadDir(p.registryDir)
	if err != nil {
		return fmt.Errorf("scan plugin registry: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sock") {
			continue
		}
		if err := p.registerLocked(ctx, filepath.Join(p.registryDir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (p *pluginClients) registerLocked(ctx context.Context, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := dialUnix(socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("plugin registration GetInfo on %s: %w", socket, err)
	}
	if info.Type != draPluginType {
		return nil
	}
	if old, ok := p.drivers[info.Name]; ok && old.endpoint == info.Endpoint {
		return nil
	}
	draConn, err := dialUnix(info.Endpoint)
	if err != nil {
		_, _ = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: err.Error()})
		return err
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		draConn.Close()
		return fmt.Errorf("plugin registration status to %s: %w", info.Name, err)
	}
	if old, ok := p.drivers[info.Name]; ok {
		old.conn.Close()
	}
	p.drivers[info.Name] = &driverConn{endpoint: info.Endpoint, conn: draConn, client: drapb.NewDRAPluginClient(draConn)}
	if offersHealth(info) {
		go watchHealth(p.ctx, info.Name, draConn, p.health, p.healthChanged)
	}
	return nil
}

func (p *pluginClients) close() {
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, d := range p.drivers {
		d.conn.Close()
		delete(p.drivers, name)
	}
}

func dialUnix(path string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return conn, nil
}
