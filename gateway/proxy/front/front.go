// Package front picks a Proxy's HTTP front once, behind one interface:
// the fasthttp front (gateway/proxy/fastfront), the default, or Go's
// net/http server (gateway/proxy/httpfront). With TLS the fasthttp front
// does the handshakes itself and hands the connections that negotiate
// HTTP/2 by ALPN to a net/http server of the same proxy (tlsfront.go).
// A process knows only Front and New.
package front

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/proxy/fastfront"
	"github.com/dwara/dwara/gateway/proxy/h2server"
	"github.com/dwara/dwara/gateway/proxy/httpfront"
)

// Front is one HTTP server of a Proxy on a listener, whichever parses the
// requests: the fasthttp front or Go's net/http server
// (New), or a plain *http.Server of another handler
// (NewServerFront). A process chooses it once and knows only this.
//
// Serve serves the connections accepted on ln, which it takes over
// (Shutdown closes it), and returns nil after Shutdown, also when Shutdown
// came first; else the listener's error. Shutdown stops
// accepting and lets the requests in flight finish within ctx; what it
// does with the connections still open when ctx ends is each front's (see
// New), and it then returns ctx's error. Each is called once, from
// any goroutine.
type Front interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// The kinds of front of Config.Kind.
const (
	// FastHTTP is the fasthttp front (fastfront.NewServer), which serves
	// HTTP/1.1 and, with TLS, hands the connections that negotiate HTTP/2
	// by ALPN to a net/http server of the same proxy.
	FastHTTP = "fasthttp"
	// NetHTTP is Go's net/http server, for everything (HTTP/2 by ALPN
	// with TLS, h2c without).
	NetHTTP = "net/http"
)

// Default is the kind "" stands for: FastHTTP.
func Default() string { return FastHTTP }

// ErrUnknown is the error of New for a kind that is not one of
// FastHTTP and NetHTTP; the error returned wraps it with the
// kind and the kinds there are.
var ErrUnknown = errors.New("unknown front")

// ErrLoopRemoved is the error of New for "loop", the epoll front of
// earlier releases.
var ErrLoopRemoved = errors.New("the loop front was removed (it served no faster than the fasthttp front over the benchmark's workload matrix); use --front fasthttp, the default")

// Config is what New builds a front from. The zero value is a
// plain Default with no timeout and no cap.
type Config struct {
	// Kind is FastHTTP or NetHTTP; "" means
	// Default().
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
	// HTTP2 is the server of the connections that negotiate HTTP/2 on the
	// fasthttp front with TLS: HTTP2Dwara ("" stands for it) or
	// HTTP2NetHTTP. The net/http front serves HTTP/2 itself: it takes ""
	// or HTTP2NetHTTP. Anything else is ErrUnknown.
	HTTP2 string
}

// The HTTP/2 servers of Config.HTTP2.
const (
	// HTTP2Dwara is gateway/proxy/h2server, the default.
	HTTP2Dwara = "dwara"
	// HTTP2NetHTTP is Go's net/http server.
	HTTP2NetHTTP = "net/http"
)

// New returns the front of p that c describes, not yet serving.
// Past Shutdown's ctx the net/http front closes the connections still
// open; fasthttp has no such close, so on the fasthttp front Shutdown only
// stops waiting, and those connections end as their clients go or their
// timeouts pass (with TLS, the HTTP/2 connections, which net/http serves,
// are closed). An unknown kind is ErrUnknown; "loop" is ErrLoopRemoved.
func New(p *proxy.Proxy, c Config) (Front, error) {
	kind := c.Kind
	if kind == "" {
		kind = Default()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case kind == NetHTTP && c.HTTP2 != "" && c.HTTP2 != HTTP2NetHTTP:
		return nil, fmt.Errorf("%w HTTP/2 server %q for the %s front, which serves HTTP/2 itself: want %q", ErrUnknown, c.HTTP2, NetHTTP, HTTP2NetHTTP)
	case c.HTTP2 != "" && c.HTTP2 != HTTP2Dwara && c.HTTP2 != HTTP2NetHTTP:
		return nil, fmt.Errorf("%w HTTP/2 server %q: want %q or %q", ErrUnknown, c.HTTP2, HTTP2Dwara, HTTP2NetHTTP)
	}
	switch kind {
	case NetHTTP:
		return httpfront.New(p, c.ReadHeaderTimeout, c.IdleTimeout, c.TLS, c.MaxConns), nil
	case FastHTTP:
		return newFastFront(p, c), nil
	case "loop":
		return nil, ErrLoopRemoved
	}
	return nil, fmt.Errorf("%w %q: want %q or %q", ErrUnknown, kind, FastHTTP, NetHTTP)
}

// NewServerFront returns srv, a net/http server of another handler than
// a Proxy (an API, metrics), as a Front: httpfront.NewServerFront.
func NewServerFront(srv *http.Server, tlsConfig *tls.Config, maxConns int) Front {
	return httpfront.NewServerFront(srv, tlsConfig, maxConns)
}

// newFastFront is the fasthttp front of p: plain, or with c.TLS a
// tlsFront, whose HTTP/2 server of the same proxy (h2server's, or with
// HTTP2NetHTTP Go's) serves the connections that negotiate HTTP/2, with
// the timeouts of the net/http front.
func newFastFront(p *proxy.Proxy, c Config) Front {
	if c.TLS == nil {
		return fastfront.New(p, c.ReadHeaderTimeout, c.IdleTimeout, c.MaxConns)
	}
	fast := fastfront.NewServerTimeouts(p, c.ReadHeaderTimeout, c.IdleTimeout)
	tc := c.TLS.Clone()
	tc.NextProtos = []string{"h2", "http/1.1"}
	if c.HTTP2 == HTTP2NetHTTP {
		// As its TLSConfig is nil, h2's Serve configures HTTP/2 for the
		// *tls.Conn the front hands it.
		h2 := httpfront.NewServer(p, c.ReadHeaderTimeout, c.IdleTimeout)
		h2.Protocols = httpfront.HTTP1And2()
		h2.HTTP2 = httpfront.HTTP2Config()
		return newTLSFront(tc, c.ReadHeaderTimeout, c.MaxConns, c.Logger, fast, h2)
	}
	// The handler is the net/http front's, without the ConnContext that
	// joins Go's server's two writes of an answer: h2server writes an
	// answer's frames in one write itself. Answers stream for as long as
	// they move: the stall timeout bounds a handler's wait for the
	// client's flow control (its SetWriteDeadline) and each write to the
	// connection (WriteTimeout), so a client that takes nothing, by
	// either, is cut.
	own := &h2server.Server{
		Handler: httpfront.Handler(p),
		// The request head's cap of the other fronts, with HTTP/2's 32
		// bytes a field (RFC 9113, section 6.5.2) for 128 fields.
		MaxHeaderListSize: httpfront.MaxHeadBytes + 32*128,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		WriteTimeout:      p.StallTimeout(),
		Log:               c.Logger,
	}
	return newTLSFront(tc, c.ReadHeaderTimeout, c.MaxConns, c.Logger, fast, own)
}
