package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Front is one HTTP server of a Proxy on a listener, whichever parses the
// requests: the fasthttp front or Go's net/http server
// (NewFront), or a plain *http.Server of another handler
// (NewHTTPServerFront). A process chooses it once and knows only this.
//
// Serve serves the connections accepted on ln, which it takes over
// (Shutdown closes it), and returns nil after Shutdown, also when Shutdown
// came first; else the listener's error. Shutdown stops
// accepting and lets the requests in flight finish within ctx; what it
// does with the connections still open when ctx ends is each front's (see
// NewFront), and it then returns ctx's error. Each is called once, from
// any goroutine.
type Front interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// The kinds of front of FrontConfig.Kind.
const (
	// FrontFastHTTP is the fasthttp front (NewFastServer), which serves
	// HTTP/1.1 and, with TLS, hands the connections that negotiate HTTP/2
	// by ALPN to a net/http server of the same proxy.
	FrontFastHTTP = "fasthttp"
	// FrontNetHTTP is Go's net/http server, for everything (HTTP/2 by ALPN
	// with TLS, h2c without).
	FrontNetHTTP = "net/http"
)

// DefaultFront is the kind "" stands for: FrontFastHTTP.
func DefaultFront() string { return FrontFastHTTP }

// ErrUnknownFront is the error of NewFront for a kind that is not one of
// FrontFastHTTP and FrontNetHTTP; the error returned wraps it with the
// kind and the kinds there are.
var ErrUnknownFront = errors.New("unknown front")

// ErrLoopRemoved is the error of NewFront for "loop", the epoll front of
// earlier releases.
var ErrLoopRemoved = errors.New("the loop front was removed (it served no faster than the fasthttp front over the benchmark's workload matrix); use --front fasthttp, the default")

// FrontConfig is what NewFront builds a front from. The zero value is a
// plain DefaultFront with no timeout and no cap.
type FrontConfig struct {
	// Kind is FrontFastHTTP or FrontNetHTTP; "" means
	// DefaultFront().
	Kind string
	// ReadHeaderTimeout bounds reading a request head from its first byte
	// (on a new connection, from the accept), and with TLS each
	// handshake; 0 means no bound.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait for its next
	// request; 0 means ReadHeaderTimeout's bound (the servers' rule).
	IdleTimeout time.Duration
	// MaxConns caps the client connections open at once; further clients
	// wait in the kernel's accept queue. 0 or negative means no cap.
	MaxConns int
	// TLS, when non-nil, makes the front serve TLS with this
	// configuration (its certificate, usually by GetCertificate, and its
	// minimum version), HTTP/2 and HTTP/1.1 chosen by ALPN: the front sets
	// NextProtos on a copy. nil serves plain HTTP.
	TLS *tls.Config
	// Logger receives what the front logs of its connections (failed
	// handshakes, accept errors); nil means slog.Default().
	Logger *slog.Logger
}

// NewFront returns the front of p that c describes, not yet serving.
// Past Shutdown's ctx the net/http front closes the connections still
// open; fasthttp has no such close, so on the fasthttp front Shutdown only
// stops waiting, and those connections end as their clients go or their
// timeouts pass (with TLS, the HTTP/2 connections, which net/http serves,
// are closed). An unknown kind is ErrUnknownFront; "loop" is
// ErrLoopRemoved.
func NewFront(p *Proxy, c FrontConfig) (Front, error) {
	kind := c.Kind
	if kind == "" {
		kind = DefaultFront()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch kind {
	case FrontNetHTTP:
		return newHTTPFront(proxyServer(p, c), c.TLS, c.MaxConns, true), nil
	case FrontFastHTTP:
		return newFastFront(p, c), nil
	case "loop":
		return nil, ErrLoopRemoved
	}
	return nil, fmt.Errorf("%w %q: want %q or %q", ErrUnknownFront, kind, FrontFastHTTP, FrontNetHTTP)
}

// fastServer is the fasthttp server of p with c's timeouts.
func fastServer(p *Proxy, c FrontConfig) *fasthttp.Server {
	fast := NewFastServer(p, c.IdleTimeout)
	fast.ReadTimeout = c.ReadHeaderTimeout
	return fast
}

// newFastFront is the fasthttp front of p: plain, or with c.TLS a
// tlsFront, whose net/http server of the same proxy serves the
// connections that negotiate HTTP/2 with the timeouts of the net/http
// front.
func newFastFront(p *Proxy, c FrontConfig) Front {
	fast := fastServer(p, c)
	if c.TLS == nil {
		return &fastFront{fast: fast, maxConns: c.MaxConns}
	}
	tc := c.TLS.Clone()
	tc.NextProtos = []string{"h2", "http/1.1"}
	// As its TLSConfig is nil, h2's Serve configures HTTP/2 for the
	// *tls.Conn the front hands it.
	h2 := proxyServer(p, c)
	h2.Protocols = http1And2()
	h2.HTTP2 = http2Config()
	return newTLSFront(tc, c.ReadHeaderTimeout, c.MaxConns, c.Logger, fast, h2)
}

// fastFront is the plain fasthttp front.
type fastFront struct {
	fast     *fasthttp.Server
	maxConns int
	gate     listenerGate
}

func (f *fastFront) Serve(ln net.Listener) error {
	ln = limit(ln, f.maxConns)
	if !f.gate.serve(ln) {
		return nil
	}
	return f.fast.Serve(ln) // nil once the listener is closed
}

// Shutdown shuts fast down, and closes the listener in case Serve had
// not started yet: fasthttp closes only the listeners it already serves.
func (f *fastFront) Shutdown(ctx context.Context) error {
	err := f.fast.ShutdownWithContext(ctx)
	f.gate.close()
	return err
}

// listenerGate is the listener a front's Serve was given, for Shutdown to
// close: so that a Serve that comes after Shutdown, or races it, returns
// at once instead of serving a server already shut down. The zero value
// is open. Safe for concurrent use.
type listenerGate struct {
	mu     sync.Mutex
	ln     net.Listener
	closed bool
}

// serve records ln as the listener served and reports true; once close
// was called, it closes ln and reports false.
func (g *listenerGate) serve(ln net.Listener) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		_ = ln.Close()
		return false
	}
	g.ln = ln
	return true
}

// close closes the listener served, if any, and makes serve refuse.
func (g *listenerGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.ln != nil {
		_ = g.ln.Close()
	}
}
