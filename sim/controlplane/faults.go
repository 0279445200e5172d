package controlplane

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	restclient "k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// Fault is what the fault layer does to the requests of the components
// behind it (Options.FaultLayer). The zero value lets everything through.
type Fault struct {
	// RefuseWrites, when not zero, is the HTTP status every write gets
	// instead of reaching the API server: POST, PUT, PATCH and DELETE,
	// bindings, evictions, status updates and dry runs alike. 429 and 503
	// are what an overloaded API server answers, 500 what a failing one
	// does.
	RefuseWrites int
	// RetryAfter goes with refused writes as Retry-After, in whole
	// seconds. client-go waits that long and sends the request again, up
	// to ten times, before its caller sees the error.
	RetryAfter time.Duration
	// Latency delays every request (a watch: its start) before it goes
	// on.
	Latency time.Duration
	// Leases: the fault also applies to Leases (leader election). Without
	// it Leases pass untouched, as API Priority and Fairness serves
	// leader election at a level of its own.
	Leases bool
}

func (f Fault) String() string {
	var parts []string
	if f.RefuseWrites != 0 {
		parts = append(parts, fmt.Sprintf("writes refused with %d", f.RefuseWrites))
		if f.RetryAfter > 0 {
			parts = append(parts, fmt.Sprintf("Retry-After %s", f.RetryAfter))
		}
	}
	if f.Latency > 0 {
		parts = append(parts, fmt.Sprintf("%s latency", f.Latency))
	}
	if len(parts) == 0 {
		return "no fault"
	}
	if f.Leases {
		parts = append(parts, "leases too")
	}
	return strings.Join(parts, ", ")
}

// Write is one write a component sent through the fault layer.
type Write struct {
	// Component is who sent it: a scheduler replica or a wire's name.
	Component string
	Time      time.Time
	Method    string
	// Path is the request's path, e.g.
	// /api/v1/namespaces/default/pods/p-0/binding.
	Path string
	// DryRun is set for dry-run requests, which change nothing.
	DryRun bool
	// Code is the status the component got back; 0 when the connection
	// broke first.
	Code int
	// Refused says the fault layer answered it.
	Refused bool
}

// faults is the switch all of a control plane's wires consult, and the
// log of the writes that went through them.
type faults struct {
	mu      sync.Mutex
	current Fault
	writes  []Write
	refused int
	// cert and caPEM are the wires' serving certificate, made once.
	cert  *tls.Certificate
	caPEM []byte
}

// serving returns the wires' TLS certificate. Wires serve TLS because
// client-go sends no credentials from a kubeconfig to a plain HTTP
// server.
func (f *faults) serving() (*tls.Certificate, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert == nil {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
		if err != nil {
			return nil, nil, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, err
		}
		f.cert, f.caPEM = &cert, certPEM
	}
	return f.cert, f.caPEM, nil
}

func (f *faults) get() Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

func (f *faults) record(w Write) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes = append(f.writes, w)
	if w.Refused {
		f.refused++
	}
}

// Wire is one component's connection to the API server through the fault
// layer: a reverse proxy on a loopback port. Cutting it is what a crash does to the component's
// requests: the ones in flight break, new ones find no one listening.
type Wire struct {
	name     string
	faults   *faults
	upstream *url.URL
	server   *http.Server
	listener net.Listener
	caPEM    []byte
	proxy    *httputil.ReverseProxy
	cutOnce  sync.Once
}

// newWire starts a wire named name to the API server of config.
func newWire(name string, f *faults, config *restclient.Config) (*Wire, error) {
	upstream, err := url.Parse(config.Host)
	if err != nil {
		return nil, err
	}
	transport, err := restclient.TransportFor(&restclient.Config{Host: config.Host, TLSClientConfig: config.TLSClientConfig})
	if err != nil {
		return nil, err
	}
	cert, caPEM, err := f.serving()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &Wire{name: name, faults: f, upstream: upstream, listener: l, caPEM: caPEM}
	w.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
		},
		Transport: transport,
		// Watches stream: every event goes on at once.
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		// With the API server down (restarting) the component sees its
		// connection break, as it would without the wire, rather than a
		// 502 from a proxy a real cluster does not have.
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) },
	}
	w.server = &http.Server{Handler: w, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go w.server.ServeTLS(l, "", "")
	return w, nil
}

// Config returns a copy of config that reaches the API server through
// the wire.
func (w *Wire) Config(config *restclient.Config) *restclient.Config {
	c := restclient.CopyConfig(config)
	c.Host = w.URL()
	c.TLSClientConfig = restclient.TLSClientConfig{CAData: w.caPEM}
	return c
}

// URL is the wire's address, where the component's client connects.
func (w *Wire) URL() string { return "https://" + w.listener.Addr().String() }

// Cut breaks every connection of the wire and refuses new ones, for good.
func (w *Wire) Cut() {
	w.cutOnce.Do(func() { w.server.Close() })
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// ServeHTTP applies the current fault to a request and passes it on.
func (w *Wire) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	f := w.faults.get()
	if strings.HasPrefix(r.URL.Path, "/apis/coordination.k8s.io/") && !f.Leases {
		f = Fault{}
	}
	if f.Latency > 0 {
		select {
		case <-time.After(f.Latency):
		case <-r.Context().Done():
			return
		}
	}
	if !isWrite(r.Method) {
		w.proxy.ServeHTTP(rw, r)
		return
	}
	rec := Write{Component: w.name, Time: time.Now(), Method: r.Method, Path: r.URL.Path, DryRun: isDryRun(r)}
	if f.RefuseWrites != 0 {
		rec.Code, rec.Refused = f.RefuseWrites, true
		w.faults.record(rec)
		refuse(rw, f)
		return
	}
	sw := &statusWriter{ResponseWriter: rw}
	defer func() {
		rec.Code = sw.code
		w.faults.record(rec)
	}()
	w.proxy.ServeHTTP(sw, r)
}

// isDryRun says whether a write is a dry run: dryRun in the query, or,
// for deletes and evictions, in the DeleteOptions of the body, which
// client-go encodes as JSON or protobuf (field 5, "All").
func isDryRun(r *http.Request) bool {
	if r.URL.Query().Has("dryRun") {
		return true
	}
	if r.Body == nil || !(r.Method == http.MethodDelete || strings.HasSuffix(r.URL.Path, "/eviction")) {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	return bytes.Contains(body, []byte(`"dryRun"`)) || bytes.Contains(body, []byte("\x2a\x03All"))
}

// refuse answers a write as an API server that will not take it does: a
// Status with the code, and Retry-After if the fault has one.
func refuse(rw http.ResponseWriter, f Fault) {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     int32(f.RefuseWrites),
		Message:  fmt.Sprintf("the fault layer refuses writes (%s)", f),
		Reason:   metav1.StatusReasonInternalError,
	}
	switch f.RefuseWrites {
	case http.StatusTooManyRequests:
		status.Reason = metav1.StatusReasonTooManyRequests
	case http.StatusServiceUnavailable:
		status.Reason = metav1.StatusReasonServiceUnavailable
	}
	if f.RetryAfter > 0 {
		secs := int((f.RetryAfter + time.Second - 1) / time.Second)
		rw.Header().Set("Retry-After", strconv.Itoa(secs))
		status.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(secs)}
	}
	body, _ := json.Marshal(status)
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(f.RefuseWrites)
	rw.Write(body)
}

// statusWriter remembers the status code of a response; it passes
// Flush on, which streaming responses need.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// SetFault switches the fault layer to f; Fault{} lets everything
// through again. It applies to requests that arrive from now on.
func (cp *ControlPlane) SetFault(f Fault) {
	cp.faults.mu.Lock()
	defer cp.faults.mu.Unlock()
	cp.faults.current = f
}

// Writes returns every write the components sent through the fault
// layer so far, in the order they were answered.
func (cp *ControlPlane) Writes() []Write {
	cp.faults.mu.Lock()
	defer cp.faults.mu.Unlock()
	return append([]Write(nil), cp.faults.writes...)
}

// RefusedWrites counts the writes the fault layer refused.
func (cp *ControlPlane) RefusedWrites() int {
	cp.faults.mu.Lock()
	defer cp.faults.mu.Unlock()
	return cp.faults.refused
}

// NewWire connects a component of the test's own (a strata-controller
// replica) to the API server through the fault layer, as id (admin if
// nil); the returned configuration is its client's. Cutting the wire is
// the component's crash, as far as the API server can tell. Wires go
// when the control plane stops.
func (cp *ControlPlane) NewWire(name string, id *Identity) (*restclient.Config, *Wire, error) {
	w, err := newWire(name, &cp.faults, cp.Config)
	if err != nil {
		return nil, nil, err
	}
	cp.wiresMu.Lock()
	cp.wires = append(cp.wires, w)
	cp.wiresMu.Unlock()
	config := cp.Config
	if id != nil {
		config = id.Config(config)
	}
	return w.Config(config), w, nil
}
